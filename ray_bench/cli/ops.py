"""Operator commands: accounts, simulate, status --watch."""

from __future__ import annotations

import functools
import os
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from ray_bench.cli.app import app, err, guarded, out
from ray_bench.errors import UserInputError
from ray_bench.numbers import strict_json

accounts_app = typer.Typer(no_args_is_help=True, help="Account state, probes and operator holds.")
app.add_typer(accounts_app, name="accounts")

AccountsOpt = Annotated[Path, typer.Option("--accounts", help="Accounts YAML.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable output.")]
StateRootOpt = Annotated[Path | None, typer.Option(
    "--state-root", help="Where accounts.sqlite is (default $RAY_BENCH_STATE_ROOT or ~/.ray-bench).")]
#: Holds live in the state root, whatever cluster runs: kept, hidden, for scripts that passed it.
UnusedAddressOpt = Annotated[str | None, typer.Option("--address", hidden=True)]


@accounts_app.command("status")
@guarded
def accounts_status(accounts: AccountsOpt, as_json: JsonOpt = False,
                    address: Annotated[str | None, typer.Option("--address", help="Ray cluster whose "
                                                               "account actors to read.")] = None,
                    state_root: StateRootOpt = None) -> None:
    """Each account's state, load, window use, spend and last error.

    State (cooling until, disabled, expired, held), in-flight against limit, tokens, window use,
    spend, last error, recommended parallelism, login expiry. Reads the shared account actors when a
    cluster runs them, else the durable state under the state root.
    """
    from ray_bench.accounts.status import account_status

    target = address or os.environ.get("RAY_ADDRESS")
    live = None
    if target:  # Ray costs 1.3 s of import: only a status read from a cluster pays it
        from ray_bench.onray.account_snapshots import live_snapshots

        live = functools.partial(live_snapshots, target, where="--address" if address else "RAY_ADDRESS")
    rows = account_status(accounts, live=live, state_root=state_root)
    if as_json:
        out.print(strict_json([r.to_json() for r in rows], indent=2, default=str), markup=False)
        return
    states = [r.state + (" (enable pending)" if r.enable_pending else "") for r in rows]
    width = max([9, *map(len, states)])
    out.print(f"{'account':<16} {'state':<{width}} {'inflight':>8} {'tokens':>7} {'cooling until':<19} {'window':>7} "
              f"{'spent':>9} {'parallel':>8}  route / last error", markup=False)
    for r, state in zip(rows, states, strict=True):
        spent = ('>=' if r.spent_lower_bound else '') + f"${r.spent_usd:.2f}"
        until = (time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r.cooling_until))
                 if r.cooling_until is not None else "-")
        out.print(f"{r.name:<16} {state:<{width}} {r.inflight:>3}/{r.limit:<4} {r.tokens:>7} "
                  f"{until:<19} {r.window_used:>7} {spent:>9} "
                  f"{r.recommended_parallelism:>8}  {r.route}{'  ' + r.last_error if r.last_error else ''}"
                  f"{'  expires ' + r.login_expires if r.login_expires else ''}", markup=False)
    for r in rows:
        if r.source != "config":
            out.print(r.line(), markup=False)


@accounts_app.command("probe")
@guarded
def accounts_probe(accounts: AccountsOpt, as_json: JsonOpt = False,
                   timeout: Annotated[float, typer.Option("--timeout", help="Seconds per probe.")] = 30.0) -> None:
    """Check each route exists and run its probe command, classifying the answer."""
    from ray_bench.accounts.status import probe_accounts

    rows = probe_accounts(accounts, timeout=timeout)
    if as_json:
        out.print(strict_json(rows, indent=2), markup=False)
    else:
        for r in rows:
            out.print(f"{r['name']:<16} {r['verdict']:<13} {r['detail']}", markup=False)
    raise typer.Exit(0 if all(r["verdict"] in ("ok", "no-probe") for r in rows) else 1)


@accounts_app.command("hold")
@guarded
def accounts_hold(accounts: AccountsOpt,
                  name: Annotated[list[str], typer.Option("--name", help="Account(s) to hold.")],
                  reason: Annotated[str, typer.Option("--reason", help="Why, for the record.")] = "operator",
                  state_root: StateRootOpt = None, address: UnusedAddressOpt = None) -> None:
    """Stop admitting cells on accounts until `release` (an operator's hold).

    Running cells finish; the hold is shared by every run on the state root.
    """
    from ray_bench.accounts.status import set_hold

    for account in set_hold(accounts, name, hold=True, reason=reason, state_root=state_root):
        out.print(f"held {account}", markup=False)


@accounts_app.command("release")
@guarded
def accounts_release(accounts: AccountsOpt,
                     name: Annotated[list[str], typer.Option("--name", help="Held account(s) to release.")],
                     state_root: StateRootOpt = None, address: UnusedAddressOpt = None) -> None:
    """Lift an operator's `accounts hold` (not a disabled account: see `enable`).

    It does not bring back an account its health disabled (auth failures) or whose login
    expired: that is `accounts enable NAME --accounts A --reason TEXT`.
    """
    from ray_bench.accounts.status import account_status, set_hold

    changed = set_hold(accounts, name, hold=False, reason="", state_root=state_root)
    states = {r.name: r.state for r in account_status(accounts, state_root=state_root)}
    for account, was_held in changed.items():
        line = f"released {account} (hold lifted)" if was_held else f"{account} was not held: nothing released"
        if states.get(account) in ("disabled", "expired"):
            line += (f"; it is {states[account]}: `ray-bench accounts enable {account} --accounts {accounts} "
                     "--reason TEXT` brings it back")
        out.print(line, markup=False)


@accounts_app.command("enable")
@guarded
def accounts_enable(accounts: AccountsOpt,
                    name: Annotated[str, typer.Argument(help="The account to bring back.")],
                    reason: Annotated[str, typer.Option("--reason", help="What changed (recorded).")],
                    state_root: StateRootOpt = None) -> None:
    """Bring back a disabled or expired account (not a held one: see `release`).

    For an account its health disabled (auth failures) or whose login expired, once the
    credential is fixed; recorded with who and why. Holds are lifted by `accounts release`.
    """
    from ray_bench.accounts.status import enable_account

    previous = enable_account(accounts, name, reason=reason, state_root=state_root)
    out.print(f"enable recorded for {name} (was {previous or 'never saved'}); its actor applies it on its "
              "next call (`accounts status` shows `enable pending` until then)", markup=False)


@app.command()
@guarded
def simulate(
    plan: Annotated[Path | None, typer.Option("--plan", help="A compiled plan to simulate.")] = None,
    spec: Annotated[Path | None, typer.Option("--spec", help="A synthetic workload spec (YAML).")] = None,
    median_min: Annotated[float, typer.Option("--median-min", help="Lognormal median cell minutes "
                                              "(with --plan).")] = 6.0,
    sigma: Annotated[float, typer.Option("--sigma", help="Lognormal sigma (with --plan).")] = 1.2,
    durations_csv: Annotated[Path | None, typer.Option("--durations-csv", help="Observed durations "
                                                       "(column `seconds`), instead of the lognormal.")] = None,
    events: Annotated[Path | None, typer.Option("--events", help="YAML list of storms, quota caps, "
                                                "auth losses.")] = None,
    history: Annotated[bool, typer.Option("--history", help="Durations known from an earlier run.")] = False,
    deadline_h: Annotated[float | None, typer.Option("--deadline-h", help="Does it finish in time?")] = None,
    usd_per_hour: Annotated[float, typer.Option("--usd-per-hour", min=0.0, help="What one running cell "
                                                "costs (with --plan): dollar windows and budgets bind on it.")] = 0.0,
    as_json: JsonOpt = False,
) -> None:
    """Capacity planning: the real scheduler on a virtual clock.

    The admission core on the plan's (or a spec's) workload, against round-robin and
    global-semaphore launchers on the same workload.
    """
    from ray_bench.config.bounded import parse_yaml, read_text_bounded
    from ray_bench.plan.store import load_plan_file
    from ray_bench.sim import simulate as run_simulation
    from ray_bench.sim.from_plan import dollar_limits, spec_from_plan

    if (plan is None) == (spec is None):
        raise UserInputError("give exactly one of --plan and --spec", where="simulate",
                             fix="--plan runs/ID/launch-plan.json or --spec configs/sim/reference.yaml")
    source: Any
    if plan is not None:
        loaded, _ = load_plan_file(plan)
        durations: dict[str, Any] = ({"csv": str(durations_csv.resolve())} if durations_csv else
                                     {"lognormal": {"median_s": median_min * 60, "sigma": sigma}})
        event_list = parse_yaml(read_text_bounded(events, UserInputError), events, UserInputError)[0] if events else []
        if not isinstance(event_list, list):
            raise UserInputError("events must be a YAML list", where=str(events), fix="- {kind: storm, ...}")
        source = spec_from_plan(loaded, durations=durations, events=event_list, history=history,
                                deadline_h=deadline_h, usd_per_hour=usd_per_hour)
        if usd_per_hour == 0 and (dollars := dollar_limits(loaded)):
            err.print(f"not modelled without --usd-per-hour: {', '.join(dollars)}", markup=False)
    else:
        source = spec
    report = run_simulation(source).to_dict()
    if as_json:
        out.print(strict_json(report, indent=2), markup=False)
        return
    out.print(f"{report['cells']} cells on {report['accounts']} accounts; capacity lower bound "
              f"{report['lower_bound_h']:.2f} h", markup=False)
    for name, r in report["policies"].items():
        line = (f"  {name:<17} makespan {r['makespan_h']:>7.2f} h  ratio {r['ratio_to_lower_bound']}  "
                f"wasted {r['wasted_attempts']}  lost {r['cells_lost']}  duplicates {r['duplicate_rows']}")
        if "meets_deadline" in r:
            line += f"  deadline {'met' if r['meets_deadline'] else 'MISSED'}"
        out.print(line, markup=False)
    err.print(f"simulated in {report['wall_s']:.2f}s", markup=False)


@app.command()
@guarded
def watch(run_root: Annotated[Path, typer.Argument(help="runs/ID")],
          every: Annotated[float, typer.Option("--every", help="Seconds between refreshes.")] = 2.0,
          state_root: StateRootOpt = None) -> None:
    """A live terminal view of a run (same as `status --watch`).

    A run not taken up yet (planned, or paused or stopped with a resume to run) is waited for
    (5 min, then exit 2); then each change is said once: the counts, each account's state and
    until when, a new note; it ends with the run.
    """
    from ray_bench.cli.watch import watch_run

    code = watch_run(run_root, every=every, state_root=state_root)
    if code:
        raise typer.Exit(code)


@accounts_app.command("repair")
@guarded
def accounts_repair(accounts: AccountsOpt,
                    reason: Annotated[str, typer.Option("--reason", help="Why (recorded).")],
                    state_root: StateRootOpt = None) -> None:
    """Remove stored charges that are not finite, such as a lifetime spend of $inf.

    Each removal is recorded with who did it and why."""
    from ray_bench.accounts.status import repair_spend

    removed = repair_spend(accounts, reason=reason, state_root=state_root)
    for name, gone in removed.items():
        out.print(f"{name}: removed {gone} stored charge{'s' if gone != 1 else ''} not finite", markup=False)
    if not removed:
        out.print("no stored charge is not finite: nothing to repair", markup=False)


ledger_app = typer.Typer(no_args_is_help=True, help="The run's ledger.")
app.add_typer(ledger_app, name="ledger")


@ledger_app.command("rebuild")
@guarded
def ledger_rebuild(run_root: Annotated[Path, typer.Argument(help="runs/ID")]) -> None:
    """Recreate a lost ledger from the attempts' result.json (never over one)."""
    from ray_bench.evidence.rebuild import rebuild_ledger

    result = rebuild_ledger(run_root)
    for skipped in result.skipped:
        err.print(f"warning: skipped {skipped}", markup=False)
    out.print(result.line(), markup=False)
    err.print("not recovered: events (pauses, stops, hypotheses, circuits, exclusions, promotions, "
              "settlements); resume with `ray-bench execute`", markup=False)
