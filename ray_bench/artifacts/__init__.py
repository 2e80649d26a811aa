"""Attempt artifacts without a shared filesystem.

A cell runner writes an attempt's results and capped logs into a directory. Where that
directory ends up is decided per node, once per run:

- a node that sees the driver's run root (the driver's own node, or a filesystem shared at the
  same path) writes there directly, as on one machine (``via="run-root"``);
- any other node writes into a scratch directory of its own and returns the directory through
  Ray with the summary, bounded by the artifact cap; the driver writes it into its run root
  (``via="ray"``). The task's and the agent's files reach such a node through Ray as well;
- with ``execute --artifacts URI`` every runner uploads to an artifact store (a path, or
  ``s3://bucket/prefix`` through fsspec) and the driver keeps only the ledger (``via="store"``).

Each attempt's summary (the ledger's ``summary`` column, and ``result.json``) records where its
artifacts are: :class:`~ray_bench.models.attempt.ArtifactPlace`.
"""

from ray_bench.artifacts.bundle import Bundle, Returned, pack, unpack
from ray_bench.artifacts.route import ArtifactRoute, TreeRef
from ray_bench.artifacts.store import ArtifactStore, FsspecStore, LocalStore, open_store, parse_setting

__all__ = ["ArtifactRoute", "ArtifactStore", "Bundle", "FsspecStore", "LocalStore", "Returned", "TreeRef",
           "open_store", "pack", "parse_setting", "unpack"]
