"""The cyclic garbage collector around work that builds objects which all live on.

CPython's collector runs a pass every 700 container allocations and, every so often, walks
every object the process holds. Loading a plan of 100,000 cells makes ~1,000,000 objects that
all live as long as the command: the passes over them found nothing and cost 1.1 s of the
load's 1.9 s of CPU (issue 57). The objects of such a block are kept out of the collector's
way (:func:`kept`), and a process that holds them for its whole life moves them out of its
reach (:func:`freeze`). Garbage made later is collected as before."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def kept() -> Iterator[None]:
    """No collection while the block runs (the block's objects live on; reference counting
    still frees what it drops); the collector as it was afterwards."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def freeze(*, collect: bool = True) -> None:
    """Move every object the process holds now out of the collector's reach for good: what it
    keeps for its whole life (its modules, a plan). ``collect``: free what cycles hold first
    (a full pass; without it, cyclic garbage of the moment is never freed)."""
    if collect:
        gc.collect()
    gc.freeze()
