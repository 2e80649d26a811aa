"""`ray-bench quickstart`: the whole operator path on the bundled example suite."""

from __future__ import annotations

import os
import shutil
import time
from importlib import resources
from pathlib import Path

import yaml
from rich.console import Console

from ray_bench.api import execute_run, plan_run
from ray_bench.cli.progress import ConsoleProgress
from ray_bench.reports.build import render_markdown, write_report
from ray_bench.runroot import RunPaths
from ray_bench.sandboxes.capabilities import capabilities
from ray_bench.scheduler.driver import RunOptions

#: Demo values for the demo accounts' routes. Not secrets: they reach nothing.
DEMO_ROUTES = {"RAY_BENCH_DEMO_KEY_A": "demo-value-a-0000", "RAY_BENCH_DEMO_KEY_B": "demo-value-b-0000"}


def example_dir() -> Path:
    return Path(str(resources.files("ray_bench") / "examples" / "quickstart"))


def prepare(workdir: Path, backend: str = "local") -> tuple[Path, Path]:
    """Copy the bundled example into ``workdir`` (fresh each time) and return suite, accounts."""
    target = workdir / "suite"
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(example_dir(), target, ignore=shutil.ignore_patterns("__pycache__"))
    suite = target / "suite.yaml"
    data = yaml.safe_load(suite.read_text())
    if data["backend"] != backend:  # the example's own backend runs it as the file has it
        data["backend"] = backend
        data["backends"] = {backend: _container_backend(backend)}
        suite.write_text(yaml.safe_dump(data, sort_keys=False))
    return suite, target / "accounts.yaml"


def _container_backend(backend: str) -> dict[str, object]:
    """The example's tasks carry no image: container backends run them in the local busybox
    base image (imported from Debian's busybox-static, since no registry may be reachable)."""
    from ray_bench.sandboxes.images import BASE_IMAGE

    config: dict[str, object] = {"max_sandboxes": 4, "image": BASE_IMAGE,
                                 "resources": {"cpus": 0.5, "memory_mb": 256, "pids": 256}}
    if capabilities(backend).local_images:
        import docker

        from ray_bench.sandboxes.images import build_base_image

        build_base_image(docker.from_env())
        config["options"] = {}
    return config


def state_root(workdir: Path, run_id: str) -> Path:
    """The quickstart's own state root, one per run beside its run root: the demo accounts'
    spend, windows and health stay with the run that made them. On the machine's state root
    (``~/.ray-bench``) their lifetime budgets (``spend_usd: 2.5``) filled up after about five
    quickstarts, and every later one stopped at once (issue 25)."""
    return workdir / "state" / run_id


def run_quickstart(workdir: Path, *, backend: str = "local", console: Console | None = None,
                   address: str | None = None) -> int:
    console = console or Console()
    workdir.mkdir(parents=True, exist_ok=True)
    for name, value in DEMO_ROUTES.items():
        os.environ.setdefault(name, value)
    suite, accounts = prepare(workdir, backend)
    console.print(f"[bold]1. plan[/bold]  ray-bench plan --suite {suite} --accounts {accounts}")
    started = time.monotonic()
    run_id = _run_id(workdir / "runs")
    planned = plan_run(suite=suite, accounts=accounts, runs_dir=workdir / "runs", run_id=run_id)
    paths = RunPaths(planned.run_root)
    console.print(f"   {planned.cells} cells; receipt at {paths.receipt}")
    for warning in planned.warnings:
        console.print(f"   warning: {warning}", markup=False)
    console.print(f"   plan identity: [bold]{planned.identity}[/bold]")
    plan_path = paths.plan
    joined = f" --address {address}" if address else ""
    console.print(f"[bold]2. execute[/bold]  ray-bench execute --plan {plan_path} --confirm {planned.identity}{joined}")
    outcome = execute_run(plan_path=plan_path, confirm=planned.identity,
                          options=RunOptions(state_root=state_root(workdir, run_id), address=address),
                          observer=ConsoleProgress(console, every_sec=3.0))
    console.print(f"   {outcome.counts['valid']} valid rows, {outcome.counts['failed']} failed cells, "
                  f"{outcome.attempts_run} attempts, {outcome.wall_sec:.1f}s"
                  + (f"; stopped: {outcome.detail}" if outcome.stopped else ""))
    console.print(f"[bold]3. report[/bold]  ray-bench report {planned.run_root}")
    report = write_report(planned.run_root)
    console.print(render_markdown(report), markup=False)
    console.print("[bold]Where everything is[/bold]")
    for label, path in [("plan", plan_path), ("receipt", paths.receipt), ("ledger", paths.ledger),
                        ("attempts", paths.attempts),
                        *[(f"report ({k})", p) for k, p in report.files(planned.run_root).items()]]:
        console.print(f"   {label:<16} {path}", markup=False)
    console.print(f"   quickstart took {time.monotonic() - started:.1f}s")
    return outcome.exit_code


def _run_id(runs: Path) -> str:
    """A new run id: the time, and a count when two quickstarts start within one second."""
    stem = f"quickstart-{time.strftime('%Y%m%d-%H%M%S')}"
    n = 1
    run_id = stem
    while (runs / run_id).exists():
        n += 1
        run_id = f"{stem}-{n}"
    return run_id
