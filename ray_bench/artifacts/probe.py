"""``execute --artifacts PATH``: probed from every node before the fan-out.

Each node that will host runners writes a marker (a token of its own) into the store under
``<run_id>/.node-probe/<node id>``; the driver then reads every marker back. The run is refused
(one line, exit 2, before the ledger exists) unless every node wrote its marker and the driver
read each one back with its token: on a three-node cluster whose workers could not see DIR,
``--artifacts DIR/store`` exited 0 with 14 of 46 attempt directories missing (issue 29 item 8).
``--artifacts auto`` (the default) and ``ray`` need no probe: they return attempt directories
through Ray when a node does not see the driver's files.

The marker's two halves are here; asking every node over Ray is
:func:`ray_bench.onray.store_probe.refuse_unshared_store`.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from ray_bench.artifacts.store import ArtifactStore, open_store

PROBE_DIR = ".node-probe"
MARKER = "marker"


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
