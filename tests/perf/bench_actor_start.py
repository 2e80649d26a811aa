"""What a driver joining a shared Ray cluster waits for before its first cell (issue 30 step 6):
the node check, the cell runners' first answers, the resource supervisors' first readings and
the admission actor's first answer, in the order ``execute`` makes them (ray_bench/api.py).

A head is started here (``ray start --head --block``, its own temp dir and port, stopped at the
end; ``--address`` joins one instead), then ``--drivers`` drivers join it one after another, each
a fresh process (a Ray job of its own: Ray never lends one job's worker processes to another),
each with a fresh state root, as a test does. Each prints its phases' seconds, each from
the end of the node check (the pieces start together, so the phases overlap).

    .venv/bin/python tests/perf/bench_actor_start.py [--drivers 6] [--orders before,after] [--address ADDR]

The figures, and what they showed, are in tests/perf/README.md ("A driver's start on a shared
cluster").
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
#: Workers at nice 0, as ray-bench's own local start and cluster/local-multinode.sh run them.
ENV = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_worker_niceness": "0", "PYTHONPATH": str(ROOT)}


def driver(address: str, state_root: Path, order: str) -> dict[str, float]:
    """One driver's start: the product's pieces, made in execute's order (``after``: now, in
    ray_bench/api.py, every actor asked for before anything is awaited and the node check run by
    the supervisors; ``before``: at 34fe36a, the node check a task of its own and nothing else
    asked for until it answered), timed."""
    import ray

    from ray_bench.cells.nodes import CheckInputs
    from ray_bench.models.accounts import Account
    from ray_bench.onray.admission import admission_actor
    from ray_bench.onray.gate import ActorGate
    from ray_bench.onray.nodes import check_nodes
    from ray_bench.onray.pool import NAMESPACE, RayPool
    from ray_bench.onray.supervisors import RaySupervision
    from ray_bench.sandboxes.supervisor import Reserve

    t0 = time.monotonic()
    ray.init(address=address, namespace=NAMESPACE, log_to_driver=False)
    out = {"connect": time.monotonic() - t0}
    t = time.monotonic()
    alive = [n for n in ray.nodes() if n.get("Alive")]
    inputs = CheckInputs(routes=(), backends=())
    if order == "after":
        admission_actor(state_root)
        supervision = RaySupervision([(n["NodeID"], n["NodeManagerAddress"]) for n in alive], Reserve(0), "bench")
        pool = RayPool(2, nodes={n["NodeID"] for n in alive})
        checks = check_nodes(inputs, alive, on=supervision.checkers())
        supervision.keep({c.node_id for c in checks if c.ok})
        pool.keep({c.node_id for c in checks if c.ok})
    else:
        checks = check_nodes(inputs, alive)
    assert all(c.ok for c in checks), checks
    out["node check"] = time.monotonic() - t
    if order == "before":
        pool = RayPool(2, nodes={c.node_id for c in checks})
        supervision = RaySupervision([(c.node_id, c.address) for c in checks], Reserve(0), "bench")
    account = Account.model_validate({"name": "a", "route": {"env": {"K": "K"}}, "limits": {"max_concurrent": 2}})
    ActorGate("bench", [account], {"local": 2}, state_root=state_root)
    out["admission"] = time.monotonic() - t
    assert not supervision.check()
    out["supervisors"] = time.monotonic() - t
    ray.get([r.node_id.remote() for r in pool._runners])
    out["runners"] = time.monotonic() - t
    out["total"] = time.monotonic() - t0
    ray.shutdown()
    return out


def start_head(temp: Path) -> tuple[subprocess.Popen[bytes], str]:
    with socket.socket() as s:
        s.bind(("", 0))
        port = s.getsockname()[1]
    head = subprocess.Popen(
        [str(Path(sys.executable).parent / "ray"), "start", "--head", "--block", f"--port={port}",
         "--num-cpus=2", "--include-dashboard=false", "--disable-usage-stats", f"--temp-dir={temp}"],
        env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    assert head.stdout is not None
    for line in head.stdout:
        if b"block forever" in line:
            return head, f"127.0.0.1:{port}"
    raise SystemExit("the head did not start")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--drivers", type=int, default=6)
    parser.add_argument("--address")
    parser.add_argument("--orders", default="before,after", help="drivers take these in turn")
    parser.add_argument("--driver-of", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.driver_of:
        sys.path.insert(0, str(ROOT))
        address, order = args.driver_of
        print(json.dumps(driver(address, Path(tempfile.mkdtemp(prefix="rb-bench-state-")), order)))
        return
    temp = Path(tempfile.mkdtemp(prefix="rb-bench-ray-", dir="/tmp"))
    head, address = (None, args.address) if args.address else start_head(temp)
    try:
        orders = args.orders.split(",")
        totals: dict[str, list[float]] = {o: [] for o in orders}
        for i in range(args.drivers):
            order = orders[i % len(orders)]
            load = os.getloadavg()[0]
            done = subprocess.run([sys.executable, __file__, "--driver-of", address, order], env=ENV,
                                  capture_output=True, text=True, check=True)
            row = json.loads(done.stdout.strip().splitlines()[-1])
            totals[order].append(row["total"])
            print(f"driver {i + 1} {order} (load {load:.1f}): "
                  + ", ".join(f"{k} {v:.1f} s" for k, v in row.items()), flush=True)
        for order, values in totals.items():
            print(f"{order}: median total {statistics.median(values):.1f} s over {len(values)} drivers")
    finally:
        if head is not None:
            os.killpg(head.pid, signal.SIGTERM)
            head.wait(timeout=60)


if __name__ == "__main__":
    main()
