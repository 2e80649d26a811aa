"""The runner's side: run an attempt where its node stands (see :mod:`ray_bench.artifacts`).

A node that sees the driver's files runs the attempt as on one machine. Any other node gets
the task's and the agent's trees through Ray (fetched once per runner process and content
key, kept under the process's stage root) and runs the attempt in a scratch directory of its
own, which then goes to the artifact store or back through Ray, and is removed.
"""

from __future__ import annotations

import asyncio
import hashlib
import shutil
import tempfile
from dataclasses import replace
from pathlib import Path, PurePath
from typing import Any

from ray_bench.artifacts.bundle import FIRST, Bundle, Returned, pack, unpack
from ray_bench.artifacts.route import ArtifactRoute, TreeRef
from ray_bench.artifacts.store import open_store
from ray_bench.cells.runner import (
    KEEP_CANCELLED,
    _new_stage_root,
    _shielded,
    cancelled_summary,
    peek_cancelled,
    run_attempt,
)
from ray_bench.cells.spec import AttemptSpec
from ray_bench.errors import ArtifactStoreError
from ray_bench.models.attempt import ArtifactPlace, AttemptError, AttemptSummary
from ray_bench.runroot import ATTEMPTS_DIR, DISK_FULL_ERROR, is_disk_full
from ray_bench.sandboxes import SandboxBackend

#: What travels back besides the collected ``/logs`` (already under the artifact cap): the
#: agent's and verifier's captured output, ``result.json``, the steps' files.
BUNDLE_SLACK_BYTES = 16 << 20

_ROOT: list[Path] = []
_TREES: dict[str, Path] = {}
_FETCHING: dict[str, asyncio.Lock] = {}


def store_key(spec: AttemptSpec) -> str:
    """Where an attempt's directory goes in a store: the run root's own layout (its name too)."""
    return f"{spec.run_id}/{ATTEMPTS_DIR}/{PurePath(spec.attempt_dir).name}"


def sees(probe: str, token: str) -> bool:
    """Whether this node reads the driver's probe file with the driver's token (the same
    filesystem, not merely the same path)."""
    try:
        return Path(probe).read_text() == token
    except (OSError, UnicodeDecodeError):
        return False


async def run_routed(spec: AttemptSpec, backend: SandboxBackend) -> AttemptSummary | Returned:
    route = spec.artifacts
    if route is None or (route.local_files and route.store is None):
        return await run_attempt(spec, backend, ArtifactPlace(via="run-root", uri=spec.attempt_dir))
    local = spec if route.local_files else await _with_local_trees(spec, route)
    scratch = Path(tempfile.mkdtemp(prefix=f"{spec.attempt_id}-", dir=_root()))
    local = replace(local, attempt_dir=str(scratch))
    place = (ArtifactPlace(via="store", uri=open_store(route.store).uri_of(store_key(spec))) if route.store
             else ArtifactPlace(via="ray", uri=spec.attempt_dir))
    try:
        try:
            summary = await run_attempt(local, backend, place)
        except asyncio.CancelledError:
            kept = peek_cancelled(spec.attempt_id)
            if kept is not None:
                await _ship_cancelled(kept, scratch, spec, route)
            raise
        if route.store is not None:
            try:
                await asyncio.to_thread(open_store(route.store).put_tree, scratch, store_key(spec))
                return summary
            except ArtifactStoreError as exc:  # nothing is lost: the files come back through Ray
                summary.artifacts = ArtifactPlace(via="ray", uri=spec.attempt_dir, error=str(exc)[:500])
                _rewrite_result(scratch, summary)
        bundle = pack(scratch, spec.artifact_cap_bytes + BUNDLE_SLACK_BYTES)
        if bundle.omitted and summary.artifacts is not None:
            summary.artifacts.omitted_files = bundle.omitted
        return Returned(summary, bundle)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


#: How long a cancelled attempt's directory may take to reach the store (its files are a few
#: MB at most, under the artifact cap): the cancellation waits that long at most.
CANCEL_SHIP_SEC = 60.0


#: Cancelled attempts' directories packed for the driver, by attempt id, until it asks
#: (:func:`cancelled_reply`); as many as the runner keeps cancelled summaries.
_CANCELLED_BUNDLES: dict[str, Bundle] = {}


async def _ship_cancelled(kept: AttemptSummary, scratch: Path, spec: AttemptSpec, route: ArtifactRoute) -> None:
    """A cancelled attempt's directory (its agent's logs, ``usage.json``, ``result.json``: what
    its cost is read from) still reaches the driver's view: the store, or, through Ray, packed
    here for the driver's question (a cancelled Ray task returns no value), so the summary the
    driver asks for points at files that exist."""
    place = kept.artifacts
    if place is None:
        return
    if route.store is not None and place.via == "store":
        put = asyncio.to_thread(open_store(route.store).put_tree, scratch, store_key(spec))
        if await _shielded(put, CANCEL_SHIP_SEC) is not None:  # None: it failed or took longer
            return
        error = f"cancelled: the attempt's files did not reach the store (failed, or past {CANCEL_SHIP_SEC:.0f} s)"
        kept.artifacts = place.model_copy(update={"error": error})
        return
    bundle = await _shielded(asyncio.to_thread(pack, scratch, spec.artifact_cap_bytes + BUNDLE_SLACK_BYTES),
                             CANCEL_SHIP_SEC)
    if bundle is None:
        kept.artifacts = place.model_copy(update={"error": "cancelled: the attempt's files on its node "
                                                           f"could not be packed in {CANCEL_SHIP_SEC:.0f} s"})
        return
    if bundle.omitted:
        kept.artifacts = place.model_copy(update={"omitted_files": bundle.omitted})
    _CANCELLED_BUNDLES[spec.attempt_id] = bundle
    while len(_CANCELLED_BUNDLES) > KEEP_CANCELLED:
        _CANCELLED_BUNDLES.pop(next(iter(_CANCELLED_BUNDLES)))


def cancelled_reply(attempt_id: str) -> AttemptSummary | Returned | None:
    """What a cancelled attempt left here, once: its summary, with its packed directory when it
    ran through Ray (:func:`receive` writes it into the run root), or None."""
    summary = cancelled_summary(attempt_id)
    bundle = _CANCELLED_BUNDLES.pop(attempt_id, None)
    if summary is None:
        return None
    return summary if bundle is None else Returned(summary, bundle)


def receive(reply: AttemptSummary | Returned, spec: AttemptSpec) -> AttemptSummary:
    """The driver's side: write a returned directory into the run root; the summary, made an
    ``executor`` failure when the attempt's directory is not where it says (:func:`arrived`)."""
    if not isinstance(reply, Returned):
        return _checked(reply, spec)
    summary = reply.summary
    try:
        unpack(reply.bundle, Path(spec.attempt_dir))
    except Exception as exc:  # a full disk must not lose the summary (the ledger still gets it)
        place = summary.artifacts or ArtifactPlace(via="ray", uri=spec.attempt_dir)
        summary.artifacts = place.model_copy(update={"error": f"not written: {type(exc).__name__}: {exc}"[:500]})
        if is_disk_full(exc) and summary.error is None:  # the host's fault: the run stops as disk_full
            summary.error = AttemptError(type=DISK_FULL_ERROR, message=str(exc)[:500], failure_class="stack")
    return _checked(summary, spec)


def arrived(summary: AttemptSummary, spec: AttemptSpec) -> bool:
    """Whether the attempt's ``result.json`` is where its summary says, as the driver sees it:
    the run root (``run-root``, ``ray``) or the store (``store``). A row whose directory is
    missing points the ledger at nothing: on a cluster whose workers wrote another view of
    ``--artifacts DIR`` 14 of 46 valid rows had none (issue 29 item 8)."""
    place = summary.artifacts
    if place is None:
        return True  # no directory was claimed (an attempt lost or cancelled before it ran)
    if place.via == "store" and spec.artifacts is not None and spec.artifacts.store is not None:
        return open_store(spec.artifacts.store).has_file(f"{store_key(spec)}/{FIRST}")
    return (Path(spec.attempt_dir) / FIRST).is_file()


def _checked(summary: AttemptSummary, spec: AttemptSpec) -> AttemptSummary:
    if summary.error is not None or summary.lost or summary.cancelled or arrived(summary, spec):
        return summary
    where = summary.artifacts.uri if summary.artifacts is not None and summary.artifacts.uri else spec.attempt_dir
    summary.error = AttemptError(
        type="ArtifactsMissing", failure_class="executor",
        message=f"the attempt's directory did not arrive: no {FIRST} at {where} as the driver sees it")
    return summary


def _root() -> Path:
    if not _ROOT:
        _ROOT.append(_new_stage_root(Path(tempfile.gettempdir()) / "ray-bench-remote"))
    return _ROOT[0]


async def _with_local_trees(spec: AttemptSpec, route: ArtifactRoute) -> AttemptSpec:
    changes: dict[str, Any] = {}
    if route.task is not None:
        task = await _tree(route.task)
        changes["task_path"] = str(task)
        if spec.build_context is not None:
            changes["build_context"] = str(task / Path(spec.build_context).name)
    if route.agent is not None:
        changes["agent_dir"] = str(await _tree(route.agent))
    return replace(spec, **changes)


async def _tree(tree: TreeRef) -> Path:
    """The tree on this node: fetched and unpacked once per process and content key."""
    path = _TREES.get(tree.key)
    if path is not None:
        return path
    lock = _FETCHING.setdefault(tree.key, asyncio.Lock())
    async with lock:
        path = _TREES.get(tree.key)
        if path is None:
            bundle: Bundle = await tree.ref
            path = _root() / "trees" / hashlib.sha256(tree.key.encode()).hexdigest()[:32]
            shutil.rmtree(path, ignore_errors=True)
            unpack(bundle, path)
            _TREES[tree.key] = path
    return path


def _rewrite_result(scratch: Path, summary: AttemptSummary) -> None:
    (scratch / FIRST).write_text(summary.result_text())
