"""Which account takes which cell: the one account choice, as pure code.

Both gates call :func:`assign` — :class:`~ray_bench.scheduler.admission.CoreGate` (in
process: tests and the simulator) and :class:`~ray_bench.onray.gate.ActorGate` (Ray
actors shared across runs) — and then start the chosen leases atomically on the accounts.

The rules, in order:

- **Retries go elsewhere.** A cell that failed on an account is sent to another one when
  any other has room (``LeaseRequest.avoid``). When the failure was the account's (a 5xx,
  an overload, a refused login: ``LeaseRequest.shun``) it waits rather than go back to that
  account while another live account could take it later (issue 25: one cell used six
  attempts on an account answering 500 while the healthy one was busy).
- **Degraded accounts last.** A degraded account's one probe start is used only when no
  healthy account has room.
- **Quota-aware placement.** An account whose binding limit is a cell-count window (its
  window allows fewer starts than its slots could use at the run's typical cell length) gets
  the longest cells of the batch: every start it makes costs a window slot, so each should
  buy as much work as it can. Other accounts take the rest. (An account whose login expires
  within a cell's time limit is no candidate at all: the gates leave it out.)
- **Headroom.** Among the rest, the account with the largest free fraction of its limit,
  then the most free slots, then the name (deterministic).
- **A judge account's slot too.** A cell whose verifier takes its credentials from another
  account (``LeaseRequest.judge``: the arm's judge role routed to a named account) holds a
  lease there as well, for the cell's life: it goes only to an account where both fit (its
  judge's slots are counted with that account's own cells), and the gates start both or neither
  (:func:`judge_leases`), the judge's first. Nothing is held while waiting for the other, so two
  cells cannot each hold what the other waits for. For the cell's life, not its verifier's: a
  lease asked for when the agent is done would have the cell wait holding its account and sandbox
  (or lose its workspace), and the verifier must follow its agent at once; the price is a judge
  slot idle during the agent phase (its ``max_concurrent`` bounds the cells that use it).

Which cells the driver asks for (:func:`reserve_below`): while the long cells left are more
than the window-bound accounts can use, everyone takes the longest first. Once they are not,
the long cells are *reserved*: the slots of the other accounts take the longest cells below a
threshold, and only the window-bound accounts' free slots take the long ones. Without this,
longest-first hands the long cells to every account early, and a window-bound account ends
the run on short cells, idle between the starts its window allows (measured on
``configs/sim/harder.yaml``: a1, 8 slots and 40 starts per 5 h, idled 50 of its 229
slot-hours, nearly all after hour 19 of 28.6).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from ray_bench.accounts.limits import window_bound
from ray_bench.models.plan import PlanCell


@dataclass(frozen=True)
class LeaseRequest:
    """One cell asking for an account slot; ``horizon_sec`` is how long it may hold it,
    ``expected_sec`` how long it is expected to take (history or this run's observations),
    ``avoid`` the account its last attempt failed on."""

    lease_id: str
    cell: PlanCell
    horizon_sec: float
    expected_sec: float = 0.0
    avoid: str | None = None
    #: The run's typical cell length (median expected), for telling window-bound accounts apart.
    typical_sec: float = 0.0
    #: What the cell is expected to cost (scheduler/spend.py): reserved against the account's
    #: budget while it runs.
    expected_usd: float = 0.0
    #: ``avoid`` failed the cell by its own fault: never back there while another live
    #: account could take it.
    shun: bool = False
    #: The account the cell's verifier takes its credentials from, when not the one it runs on
    #: (:func:`ray_bench.plan.roles.judge_lease_account`): the cell holds a lease there too.
    judge: str | None = None


def judge_lease(lease_id: str) -> str:
    """The id of the second lease a cell holds on its judge account (its run's prefix kept, so
    that a resumed run's ``abandon_run`` and the renewal's expiry free it with the first)."""
    return f"{lease_id}/judge"


def judge_leases(shares: Mapping[str, Sequence[LeaseRequest]]) -> dict[str, list[LeaseRequest]]:
    """Judge account -> the requests of ``shares`` (account -> its requests, as :func:`assign`
    answers) that hold a lease there too: those whose judge is not the account they run on."""
    out: dict[str, list[LeaseRequest]] = {}
    for name, share in shares.items():
        for request in share:
            if request.judge is not None and request.judge != name:
                out.setdefault(request.judge, []).append(request)
    return out


@dataclass(frozen=True)
class Candidate:
    """An account that may start cells now, as the choice sees it."""

    name: str
    headroom: int
    limit: int
    probe: bool = False
    #: Window starts per second (``max_cells / window``), when the account has a cell window.
    window_rate: float | None = None

    def window_bound(self, typical_sec: float) -> bool:
        """The window, not the slots, limits this account at the typical cell length: its
        ``limit`` slots busy with typical cells would start more cells than it allows."""
        return window_bound(self.window_rate, self.limit, typical_sec)


def assign(requests: Sequence[LeaseRequest], candidates: Sequence[Candidate],
           typical_sec: float, live: Iterable[str] = (),
           judge_room: Mapping[str, int] | None = None) -> dict[str, list[LeaseRequest]]:
    """Account name -> the requests it should start, in request order. The window-bound
    accounts' room is reserved for the batch's longest requests first; the others take the
    requests in order while they have room. ``live``: the accounts that will admit cells
    again without an operator (room now or not), for ``shun``. ``judge_room``: the slots the
    accounts named as a request's ``judge`` have free (a held or refusing one: none); a request
    goes to its judge account, or to another while its judge has a slot left, which it takes."""
    live = frozenset(live)
    room = {c.name: c.headroom for c in candidates if c.headroom > 0}
    slots = dict(judge_room or {})  # free slots of the judge accounts, whatever uses them
    by_name = {c.name: c for c in candidates}
    bound = {c.name for c in candidates if c.window_bound(typical_sec)}
    bound_room = {n: room[n] for n in bound if n in room}

    def judged(request: LeaseRequest, name: str) -> bool:
        return request.judge is None or request.judge == name or slots.get(request.judge, 0) > 0

    def take(request: LeaseRequest, name: str) -> None:
        for rooms in (room, bound_room):
            if name in rooms:
                rooms[name] -= 1
        if name in slots:
            slots[name] -= 1
        judge = request.judge
        if judge is not None and judge != name:
            slots[judge] -= 1
            for rooms in (room, bound_room):
                if judge in rooms:
                    rooms[judge] = min(rooms[judge], slots[judge])

    # The window-bound accounts' share goes to the longest requests of the batch.
    longest = sorted(range(len(requests)), key=lambda i: (-requests[i].expected_sec, i))
    reserved: dict[int, str] = {}
    for i in longest:
        request = requests[i]
        fits = [n for n, left in bound_room.items() if left > 0 and n != request.avoid and judged(request, n)]
        if not fits:
            continue
        name = max(fits, key=lambda n: _key(by_name[n], bound_room[n]))
        reserved[i] = name
        take(request, name)  # what is left of ``room`` is for the other requests
    out: dict[str, list[LeaseRequest]] = {}
    for i, request in enumerate(requests):
        chosen = reserved.get(i)
        if chosen is None:
            open_ = [n for n, left in room.items() if left > 0 and n not in bound]
            if not open_:  # only window-bound room is left: better used than idle
                open_ = [n for n, left in room.items() if left > 0]
            open_ = [n for n in open_ if judged(request, n)]
            others = [n for n in open_ if n != request.avoid]
            open_ = others if others or (request.shun and live - {request.avoid}) else open_
            if not open_:
                continue  # no room for it; a reserved longer cell further on may still go
            chosen = max(open_, key=lambda n: _key(by_name[n], room[n]))
            take(request, chosen)
        out.setdefault(chosen, []).append(request)
    return out


def _key(candidate: Candidate, room: int) -> tuple[int, float, int, str]:
    return (0 if candidate.probe else 1, room / max(1, candidate.limit), room, candidate.name)


#: The reservation starts when the long work left is within this factor of what the
#: window-bound accounts can do: the remaining time is estimated from expected durations and
#: comes out short (idle slots, storms, the tail). Measured on the harder workload with
#: history, seeds 0-2: 1.0 -> ratio 1.062 / 1.080 / 1.050, 1.25 -> 1.055 / 1.066 / 1.038,
#: 1.5 -> 1.079 / 1.055 / 1.065.
RESERVE_MARGIN = 1.25


@dataclass(frozen=True)
class WindowShare:
    """A window-bound account, as the reservation sees it: ``limit`` slots, ``rate`` window
    starts per second, ``headroom`` starts it may make now."""

    limit: int
    rate: float
    headroom: int = 0

    @property
    def break_even_sec(self) -> float:
        """The cell length at which its window and its slots bind together."""
        return self.limit / self.rate


def reserve_below(profile: Iterable[tuple[float, int]], shares: Sequence[WindowShare],
                  remaining_sec: float) -> float | None:
    """The threshold under which the other accounts' slots should take cells, or None (no
    reservation: longest first for everyone).

    ``profile``: (expected seconds, cells) of the pending cells, longest first;
    ``remaining_sec``: how long the run still has. A window-bound account kept busy with
    cells at least as long as its break-even length never waits on its window. Taking the
    window-bound accounts by break-even length, longest first: once the pending work in
    cells at least that long is no more than their slots can do in the remaining time
    (``limit * remaining`` each, times :data:`RESERVE_MARGIN`), every such cell is needed
    there, and the threshold is that length. Before that, longest first for everyone loses them nothing."""
    if not shares or remaining_sec <= 0:
        return None
    ordered = sorted(shares, key=lambda s: -s.break_even_sec)
    threshold: float | None = None
    supply = 0.0
    need = 0.0
    entries = iter(profile)
    entry = next(entries, None)
    for share in ordered:
        length = share.break_even_sec
        need += share.limit * remaining_sec * RESERVE_MARGIN
        while entry is not None and entry[0] >= length:
            supply += entry[0] * entry[1]
            entry = next(entries, None)
        if 0 < supply <= need:
            threshold = length
    return threshold
