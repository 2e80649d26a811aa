"""SDK clients sized to the work: one for control calls and one per ``per_client`` sandboxes.

One ``AsyncDaytona`` holds one HTTP session capped at ``connection_pool_maxsize`` connections
(250 by default), and a sandbox made by a client sends its toolbox calls through that client's
session. A long exec holds a connection for its whole run, and a watched one a second for its
output polls: with every cell of a node on one client, the 251st concurrent exec (and every
create, status read and delete behind it) queued silently until one finished. Here each client
carries at most ``per_client`` sandboxes, at most half its pool, and lookups, listings and
deletes go through a client that carries none, so they never queue behind a command."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field

from daytona import AsyncDaytona


@dataclass
class Lease:
    """One sandbox's share of a client; :meth:`release` (idempotent) gives it back."""

    client: AsyncDaytona
    _slot: list[int]
    _released: bool = field(default=False)

    def release(self) -> None:
        if not self._released:
            self._released = True
            self._slot[0] -= 1


class ClientPool:
    """The clients of one event loop (an SDK session is bound to the loop it was made on)."""

    def __init__(self, make: Callable[[], AsyncDaytona], per_client: int) -> None:
        self._make = make
        self.per_client = max(1, per_client)
        self._control: AsyncDaytona | None = None
        #: [client, [sandboxes it carries]]: the count is boxed so a lease can give it back.
        self._data: list[tuple[AsyncDaytona, list[int]]] = []

    def control(self) -> AsyncDaytona:
        """The client for get, list and delete: it carries no sandbox's commands."""
        if self._control is None:
            self._control = self._make()
        return self._control

    def lease(self) -> Lease:
        """A client for one more sandbox: the least loaded with room, else a new one."""
        open_ = [d for d in self._data if d[1][0] < self.per_client]
        if open_:
            client, slot = min(open_, key=lambda d: d[1][0])
        else:
            client, slot = self._make(), [0]
            self._data.append((client, slot))
        slot[0] += 1
        return Lease(client, slot)

    def carriers(self) -> int:
        """Clients made so far to carry sandboxes (the control client not counted)."""
        return len(self._data)

    async def close(self) -> None:
        made = [c for c, _ in self._data] + ([self._control] if self._control is not None else [])
        self._data, self._control = [], None
        for client in made:
            with contextlib.suppress(Exception):
                await client.close()  # type: ignore[no-untyped-call]
