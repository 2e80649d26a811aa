"""The ray-bench Grafana dashboard, built with grafana-foundation-sdk's typed builders so that
its JSON is valid by construction. `ray-bench.json` beside this file is its output:

    .venv/bin/python ops/grafana/dashboard.py > ops/grafana/ray-bench.json

(tests/metrics/test_dashboard.py fails when the two differ). Every panel filters on the
multi-value `run` variable, takes rates over `$__rate_interval`, has a unit, and links the
runbook of the alert it explains; state panels map values to words and colours.
"""

from __future__ import annotations

import json
import sys

from grafana_foundation_sdk.builders import common, dashboard, prometheus, stat, statetimeline, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.common import (
    BigValueGraphMode,
    LegendDisplayMode,
    LegendPlacement,
    VisibilityMode,
)
from grafana_foundation_sdk.models.dashboard import (
    DashboardCursorSync,
    DataSourceRef,
    GridPos,
    Threshold,
    ThresholdsMode,
    ValueMap,
    ValueMappingResult,
    VariableRefresh,
    VariableSort,
)

from ray_bench.metrics.exporter import ACCOUNT_STATES

DS = DataSourceRef(type_val="prometheus", uid="${datasource}")
RUN = 'run=~"$run"'
RATE = "$__rate_interval"
PER_MIN = "suffix: /min"
ROWS_PER_MIN = "suffix: rows/min"

#: The exporters serving a live driver session (`raybench_run_phase`, as `status` says; one
#: series per run and instance): live signals (pace, finish estimate, heartbeat age, account
#: state) keep to these, so that with "All" runs a finished run's linger shows no red heartbeat, a
#: paused one no finish estimate, and an account a newer run has healthy is not shown disabled by
#: an older run's last report (issue 56). Per instance: a resumed run's new driver and the linger
#: of its paused session serve the same run at once.
RUNNING = f'(raybench_run_phase{{{RUN},phase="running"}} == 1)'
#: The runs no exporter of which serves a live session.
NOT_RUNNING = f"(max by (run) (raybench_run_phase{{{RUN}}}) unless on (run) {RUNNING})"
#: What a live stat shows for a running run without a value yet (-1), and for a run that is
#: not running (-2); mappings turn them into words.
NONE_YET, NOT_LIVE = -1, -2


def _live(expr: str, on: str = "run, instance") -> str:
    """``expr``'s series served by a live session (``on="run"``: an aggregate of a running run)."""
    return f"(({expr}) and on ({on}) {RUNNING})"


def _live_stat(expr: str, none_yet: bool = True) -> str:
    """``max by (run)`` of ``expr`` over live sessions; NONE_YET for a running run without it;
    NOT_LIVE for a run that is not running."""
    codes = [(f"max by (run) {RUNNING}", NONE_YET)] if none_yet else []
    return " or on (run) ".join([f"max by (run) {_live(expr)}",
                                 *(f"({which} * 0 + ({code}))" for which, code in [*codes, (NOT_RUNNING, NOT_LIVE)])])


#: Account states as numbers for one state-timeline row per account (a mapping turns them
#: back into words and colours).
STATE_COLOURS = {"healthy": "green", "degraded": "yellow", "cooling": "orange", "expired": "purple",
                 "held": "blue", "disabled": "red", "unknown": "text"}


def _q(expr: str, legend: str = "", ref: str = "A") -> prometheus.Dataquery:
    query = prometheus.Dataquery().expr(expr).ref_id(ref)
    return query.legend_format(legend) if legend else query


def _runbook(alert: str) -> dashboard.DashboardLink:
    return (dashboard.DashboardLink(f"Runbook: {alert}").url(f"${{runbook_base}}/{alert}.md")
            .target_blank(True))


def _thresholds(*steps: tuple[float | None, str]) -> dashboard.ThresholdsConfig:
    return (dashboard.ThresholdsConfig().mode(ThresholdsMode.ABSOLUTE)
            .steps([Threshold(value=v, color=c) for v, c in steps]))


def _words(mapping: dict[str, tuple[str, str]]) -> list[ValueMap]:
    return [ValueMap(options={k: ValueMappingResult(text=t, color=c, index=i)
                              for i, (k, (t, c)) in enumerate(mapping.items())})]


def _stat(title: str, expr: str, legend: str, pos: GridPos, unit: str, **extra: object) -> stat.Panel:
    panel = (stat.Panel().title(title).datasource(DS).grid_pos(pos).unit(unit)
             .graph_mode(BigValueGraphMode.AREA).with_target(_q(expr, legend)))
    return _extras(panel, **extra)


def _series(title: str, queries: list[tuple[str, str]], pos: GridPos, unit: str,
            **extra: object) -> timeseries.Panel:
    panel = (timeseries.Panel().title(title).datasource(DS).grid_pos(pos).unit(unit)
             .legend(common.VizLegendOptions().show_legend(True).display_mode(LegendDisplayMode.LIST)
                     .placement(LegendPlacement.BOTTOM)))
    for i, (expr, legend) in enumerate(queries):
        panel = panel.with_target(_q(expr, legend, chr(ord("A") + i)))
    return _extras(panel, **extra)


def _extras(panel: object, *, description: str = "", runbook: str = "", thresholds: object = None,
            mappings: object = None, min_val: float | None = None, max_val: float | None = None) -> object:
    p = panel
    if description:
        p = p.description(description)  # type: ignore[attr-defined]
    if runbook:
        p = p.links([_runbook(runbook)])  # type: ignore[attr-defined]
    if thresholds is not None:
        p = p.thresholds(thresholds)  # type: ignore[attr-defined]
    if mappings is not None:
        p = p.mappings(mappings)  # type: ignore[attr-defined]
    if min_val is not None:
        p = p.min(min_val)  # type: ignore[attr-defined]
    if max_val is not None:
        p = p.max(max_val)  # type: ignore[attr-defined]
    return p


def build() -> dashboard.Dashboard:
    account_code = " + ".join(
        f'sum without (state) (raybench_account_state{{{RUN},state="{s}"}}) * {i + 1}'
        for i, s in enumerate(ACCOUNT_STATES))
    d = (dashboard.Dashboard("ray-bench").uid("ray-bench")
         .description("Pace, cells, accounts, sandboxes, spend, circuits, halts and drivers of ray-bench runs.")
         .tags(["ray-bench"]).refresh("30s").time("now-6h", "now").timezone("browser").editable()
         .tooltip(DashboardCursorSync.CROSSHAIR)
         .with_variable(dashboard.DatasourceVariable("datasource").label("Data source").type("prometheus"))
         .with_variable(dashboard.QueryVariable("run").label("Run").datasource(DS)
                        .query("label_values(raybench_cells, run)")
                        .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED).sort(VariableSort.ALPHABETICAL_DESC)
                        .multi(True).include_all(True).all_value(".*"))
         .with_variable(dashboard.ConstantVariable("runbook_base").value("ops/runbooks")))
    panels = [
        _stat("Valid rows (all sessions)", f"sum by (run) (raybench_run_valid_rows{{{RUN}}})", "{{run}}",
              GridPos(h=4, w=4, x=0, y=0), "short",
              description="Accepted rows in the ledger, every driver session (survives a resume)."),
        _stat("Remaining cells", f"max by (run) (raybench_remaining_cells{{{RUN}}})", "{{run}}",
              GridPos(h=4, w=4, x=4, y=0), "short"),
        _stat("Finish estimate", _live_stat(f"raybench_finish_estimate_seconds{{{RUN}}}"),
              "{{run}}", GridPos(h=4, w=4, x=8, y=0), "s",
              description="At the estimated pace; -1 (shown as 'no estimate yet') until a window holds enough "
                          "valid rows; none for a paused, stopped or finished run.",
              mappings=_words({str(NONE_YET): ("no estimate yet", "text"), str(NOT_LIVE): ("not running", "text")})),
        _stat("Deadline gap", _live_stat(f"raybench_deadline_gap_rows{{{RUN}}}"), "{{run}}",
              GridPos(h=4, w=4, x=12, y=0), "suffix: rows short",
              description="Rows the estimated pace leaves undone at the deadline; -1: no deadline or no "
                          "estimate yet; none for a run that is not running.",
              thresholds=_thresholds((None, "green"), (1, "red")),
              mappings=_words({str(NONE_YET): ("-", "text"), "0": ("on track", "green"),
                               str(NOT_LIVE): ("not running", "text")}),
              runbook="RayBenchPaceBelowRequired"),
        _stat("Driver heartbeat age",
              _live_stat(f"time() - raybench_driver_heartbeat_timestamp_seconds{{{RUN}}}",
                         none_yet=False), "{{run}}",
              GridPos(h=4, w=4, x=16, y=0), "s",
              description="Of running runs (a finished or paused run's driver is gone by design; a killed one "
                          "pages RayBenchDriverDown).",
              thresholds=_thresholds((None, "green"), (60, "orange"), (120, "red")),
              mappings=_words({str(NOT_LIVE): ("not running", "text")}),
              runbook="RayBenchDriverDown"),
        _stat("Halted", f"max by (run) (raybench_halted{{{RUN}}})", "{{run}}", GridPos(h=4, w=4, x=20, y=0),
              "none", mappings=_words({"0": ("no", "green"), "1": ("HALTED", "red")}), runbook="RayBenchHalted"),
        _series("Pace against required pace", [
            (_live(f"raybench_pace_rows_per_minute{{{RUN}}}"), "{{run}} observed {{window}}"),
            (_live(f"raybench_pace_estimate_rows_per_minute{{{RUN}}}"), "{{run}} estimate ({{window}})"),
            (_live(f"raybench_required_pace_rows_per_minute{{{RUN}}}"), "{{run}} required"),
            (_live(f"run:raybench_valid_rows_per_minute:rate15m{{{RUN}}}", on="run"), "{{run}} Prometheus 15m"),
        ], GridPos(h=9, w=12, x=0, y=4), ROWS_PER_MIN, min_val=0, runbook="RayBenchPaceBelowRequired",
            description="Valid rows per minute of running runs: observed over each window (span covered by "
                        "this driver session; the recording rule is the same definition), the estimate the "
                        "finish time uses, and what the deadline needs."),
        _series("Cells by state", [(f"sum by (run, state) (raybench_cells{{{RUN}}})", "{{run}} {{state}}")],
                GridPos(h=9, w=12, x=12, y=4), "short", min_val=0),
        _series("Account in flight against limit", [
            ("max by (account) " + _live(f"raybench_account_inflight{{{RUN}}}"), "{{account}} in flight"),
            ("max by (account) " + _live(f"raybench_account_limit{{{RUN}}}"), "{{account}} limit"),
        ], GridPos(h=9, w=12, x=0, y=13), "short", min_val=0),
        _extras(statetimeline.Panel().title("Account state").datasource(DS).grid_pos(GridPos(h=9, w=12, x=12, y=13))
                .unit("none").show_value(VisibilityMode.AUTO)
                .with_target(_q(f"max by (account) {_live(account_code)}", "{{account}}")),
                mappings=_words({str(i + 1): (s, STATE_COLOURS[s]) for i, s in enumerate(ACCOUNT_STATES)}),
                runbook="RayBenchNoUsableAccount",
                description="One row per account, coloured by its health state as the running runs report it "
                            "(a finished run's last report does not outlive it)."),
        _series("Rate-limit signals", [
            (f"sum by (account, source) (rate(raybench_rate_limit_signals_total{{{RUN}}}[{RATE}])) * 60",
             "{{account}} {{source}}"),
            (f'sum by (account) (rate(raybench_attempts_total{{{RUN},failure_class="capacity"}}[{RATE}])) * 60',
             "{{account}} capacity failures"),
        ], GridPos(h=8, w=12, x=0, y=22), PER_MIN, min_val=0),
        _series("Failed attempts by class", [
            (f'sum by (failure_class) (rate(raybench_attempts_total{{{RUN},failure_class!="none"}}[{RATE}])) * 60',
             "{{failure_class}}")], GridPos(h=8, w=12, x=12, y=22), PER_MIN, min_val=0),
        _stat("Cool-down ends", "max by (account) "
              + _live(f"raybench_account_cooldown_end_timestamp_seconds{{{RUN}}}") +
              " * 1000 or on () vector(0)", "{{account}}", GridPos(h=4, w=6, x=0, y=30), "dateTimeFromNow",
              mappings=_words({"0": ("none cooling", "green")}), runbook="RayBenchNoUsableAccount"),
        _stat("Login expiries", "min by (account) "
              + _live(f"raybench_account_login_expiry_timestamp_seconds{{{RUN}}}") +
              " * 1000 or on () vector(0)", "{{account}}", GridPos(h=4, w=6, x=6, y=30), "dateTimeFromNow",
              mappings=_words({"0": ("no HOME login", "text")}), runbook="RayBenchAccountLoginExpired"),
        _stat("Audit residue", f"max by (run) (raybench_audit_residue_sandboxes{{{RUN}}})", "{{run}}",
              GridPos(h=4, w=6, x=12, y=30), "suffix: sandboxes",
              thresholds=_thresholds((None, "green"), (1, "red")), runbook="RayBenchSandboxResidue"),
        _stat("Stopped", f"max by (run) (raybench_run_stopped{{{RUN}}})", "{{run}}",
              GridPos(h=4, w=6, x=18, y=30), "none",
              mappings=_words({"0": ("not stopped", "green"), "1": ("stopped", "red")}), runbook="RayBenchRunStopped",
              description="1 when the last session stopped (drift, halt, circuit, spend, ...); `ray-bench status` "
                          "says why."),
        _series("Sandboxes by backend", [
            (f"sum by (backend, state) (raybench_sandboxes{{{RUN}}})", "{{backend}} {{state}}")],
            GridPos(h=8, w=12, x=0, y=34), "short", min_val=0, runbook="RayBenchSandboxResidue"),
        _series("Spend", [
            (f"sum by (run, account) (raybench_run_spend_usd{{{RUN}}})", "{{run}} {{account}}"),
            (f"max by (run, scope) (raybench_spend_limit_usd{{{RUN}}}) or on () vector(0)", "limit {{scope}}"),
        ], GridPos(h=8, w=6, x=12, y=34), "currencyUSD", min_val=0, runbook="RayBenchSpendNearLimit"),
        _series("Spend rate", [
            (f"sum by (run) (rate(raybench_spend_usd_total{{{RUN}}}[{RATE}])) * 3600", "{{run}}")],
            GridPos(h=8, w=6, x=18, y=34), "suffix: USD/h", min_val=0),
        _extras(statetimeline.Panel().title("Recovery circuits").datasource(DS)
                .grid_pos(GridPos(h=8, w=12, x=0, y=42)).unit("none").show_value(VisibilityMode.AUTO)
                .with_target(_q(f"max by (run, scope) (raybench_circuit_open{{{RUN}}})", "{{run}} {{scope}}")),
                mappings=_words({"0": ("closed", "green"), "1": ("OPEN", "red")}), runbook="RayBenchCircuitOpen"),
        _series("Cell seconds by phase", [
            (f"histogram_quantile(0.9, sum by (le, phase) (rate(raybench_cell_seconds_bucket{{{RUN}}}[{RATE}])))",
             "p90 {{phase}}"),
            (f"histogram_quantile(0.5, sum by (le, phase) (rate(raybench_cell_seconds_bucket{{{RUN}}}[{RATE}])))",
             "p50 {{phase}}"),
        ], GridPos(h=8, w=12, x=12, y=42), "s", min_val=0),
        _series("Mean reward by arm", [
            (f"sum by (run, arm) (raybench_run_reward{{{RUN}}}) / sum by (run, arm) "
             f"(raybench_run_valid_rows{{{RUN}}})", "{{run}} {{arm}}")],
            GridPos(h=8, w=12, x=0, y=50), "percentunit", min_val=0, max_val=1,
            description="Over every valid row of the run, every driver session (ledger-backed gauges, "
                        "rebuilt on resume; the session counters restart at 0)."),
        _series("Attempts by outcome", [
            (f"sum by (arm, outcome) (rate(raybench_attempts_total{{{RUN}}}[{RATE}])) * 60", "{{arm}} {{outcome}}")],
            GridPos(h=8, w=12, x=12, y=50), PER_MIN, min_val=0),
    ]
    for number, panel in enumerate(panels, start=1):
        d = d.with_panel(panel.id(number))  # type: ignore[attr-defined]
    return d


def render() -> str:
    return json.dumps(build().build(), cls=JSONEncoder, indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render())
