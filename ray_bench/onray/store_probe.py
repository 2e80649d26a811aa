"""``execute --artifacts PATH`` probed from every node over Ray: each node writes its marker
(:func:`ray_bench.artifacts.probe.write_marker`), the driver reads each back
(:func:`~ray_bench.artifacts.probe.read_marker`)."""

from __future__ import annotations

import secrets
import shutil

import ray
from ray.exceptions import GetTimeoutError, RayError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from ray_bench.artifacts.probe import PROBE_DIR, probe_key, read_marker, write_marker
from ray_bench.artifacts.store import ArtifactStore, LocalStore
from ray_bench.errors import UserInputError

#: How long a node may take to write its marker (a cold worker start on a busy node ~10 s).
PROBE_TIMEOUT_SEC = 120.0


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
