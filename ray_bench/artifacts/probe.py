"""``execute --artifacts PATH``: probed from every node before the fan-out.

Each node that will host runners writes a marker (a token of its own) into the store under
``<run_id>/.node-probe/<node id>``; the driver then reads every marker back. The run is refused
(one line, exit 2, before the ledger exists) unless every node wrote its marker and the driver
read each one back with its token: on a three-node cluster whose workers could not see DIR,
``--artifacts DIR/store`` exited 0 with 14 of 46 attempt directories missing (issue 29 item 8).
``--artifacts auto`` (the default) and ``ray`` need no probe: they return attempt directories
through Ray when a node does not see the driver's files.
"""

from __future__ import annotations

import secrets
import shutil
import tempfile
from pathlib import Path

import ray
from ray.exceptions import GetTimeoutError, RayError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from ray_bench.artifacts.store import ArtifactStore, LocalStore, open_store
from ray_bench.errors import UserInputError

PROBE_DIR = ".node-probe"
MARKER = "marker"
#: How long a node may take to write its marker (a cold worker start on a busy node ~10 s).
PROBE_TIMEOUT_SEC = 120.0


def probe_key(run_id: str, node: str) -> str:
    return f"{run_id}/{PROBE_DIR}/{node}"


def write_marker(uri: str, key: str, token: str) -> str | None:
    """On a node: write ``token`` under ``key``; the problem in one line, or None."""
    try:
        with tempfile.TemporaryDirectory() as tmp:
            (Path(tmp) / MARKER).write_text(token)
            open_store(uri).put_tree(Path(tmp), key)
    except Exception as exc:  # a store raises ArtifactStoreError, a full /tmp OSError: all are the answer
        return f"cannot write its marker: {str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__}"
    return None


def read_marker(store: ArtifactStore, key: str, token: str) -> str | None:
    """On the driver: the problem with the marker under ``key``, or None when it holds ``token``."""
    try:
        with tempfile.TemporaryDirectory() as tmp:
            text = (store.get_tree(key, Path(tmp) / "m") / MARKER).read_text()
    except Exception:  # missing, unreadable: the node's path is not the driver's
        return "wrote its marker where the driver cannot read it back (the node's path is not the driver's)"
    if text != token:
        return "the driver reads another node's marker there"
    return None


@ray.remote(num_cpus=0)
def _write(uri: str, key: str, token: str) -> str | None:
    return write_marker(uri, key, token)


def probe_nodes(store: ArtifactStore, run_id: str, nodes: list[tuple[str, str]],
                timeout: float = PROBE_TIMEOUT_SEC) -> list[str]:
    """Each of ``nodes`` ((node id, address)) writes its marker, the driver reads them back:
    one problem line per node that cannot share the store."""
    tokens = {node: secrets.token_hex(16) for node, _ in nodes}
    refs = [_write.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False))
            .remote(store.uri, probe_key(run_id, node), tokens[node]) for node, _ in nodes]
    if refs:
        ray.wait(refs, num_returns=len(refs), timeout=timeout)
    problems: list[str] = []
    for (node, address), ref in zip(nodes, refs, strict=True):
        try:
            problem = ray.get(ref, timeout=0)
        except GetTimeoutError:
            ray.cancel(ref, force=True)
            problem = f"did not write its marker within {timeout:g}s"
        except RayError as exc:
            problem = f"the probe failed on the node: {type(exc).__name__}"
        if problem is None:
            problem = read_marker(store, probe_key(run_id, node), tokens[node])
        if problem is not None:
            problems.append(f"node {address} ({node[:8]}) {problem}")
    if isinstance(store, LocalStore):  # the markers said what they had to
        shutil.rmtree(store.root / run_id / PROBE_DIR, ignore_errors=True)
    return problems


def refuse_unshared_store(store: ArtifactStore, run_id: str, nodes: list[tuple[str, str]]) -> None:
    """Bad input unless every node can write ``store`` and the driver can read it back."""
    problems = probe_nodes(store, run_id, nodes)
    if problems:
        raise UserInputError(
            f"artifact store {store.uri} is not shared by every node: {len(problems)} of {len(nodes)} "
            f"cannot use it: {'; '.join(problems)}", where="--artifacts",
            fix="name a path every node writes and the driver reads (a shared filesystem, s3://...), "
                "or use --artifacts auto (attempt directories come back through Ray)")
