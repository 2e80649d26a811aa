from ray_bench.accounts import (
    AccountCore,
    AccountLimits,
    Admit,
    HealthState,
    Lease,
    Outcome,
    WindowLimit,
)
from ray_bench.scheduler import (
    CellQueue,
    CellRef,
    Dispatcher,
    DurationBook,
    choose_account,
    healthy_capacity,
    plan_starts,
)


def cells(tasks: int, arms: tuple[str, ...] = ("base", "mcp"), reps: int = 1) -> list[CellRef]:
    return [CellRef(f"t{t}/{a}/{r}", f"t{t}", a, r)
            for t in range(tasks) for r in range(reps) for a in arms]


def drain(q: CellQueue, now: float = 0.0) -> list[str]:
    out = []
    while (c := q.pop(now)) is not None:
        out.append(c.cell_id)
    return out


def test_lpt_with_history_and_pairs_together() -> None:
    hist = {"t0": 60.0, "t1": 4 * 3600.0, "t2": 600.0}
    q = CellQueue(cells(3), DurationBook(hist))
    assert drain(q) == ["t1/base/0", "t1/mcp/0", "t2/base/0", "t2/mcp/0",
                        "t0/base/0", "t0/mcp/0"]
    assert len(q) == 0


def test_no_history_keeps_suite_order_and_explores_first_repetitions() -> None:
    q = CellQueue(cells(3, arms=("a",), reps=2), DurationBook())
    assert drain(q) == ["t0/a/0", "t1/a/0", "t2/a/0", "t0/a/1", "t1/a/1", "t2/a/1"]


def test_sibling_is_next_in_line_even_after_other_pairs_became_longer() -> None:
    book = DurationBook({"t0": 100.0, "t1": 50.0})
    q = CellQueue(cells(2), book)
    assert q.pop(0.0) == CellRef("t0/base/0", "t0", "base", 0)
    book.observe("t1", 10_000.0)
    q.reprioritise("t1")
    assert q.pop(1.0) == CellRef("t0/mcp/0", "t0", "mcp", 0)
    assert q.pop(1.0) == CellRef("t1/base/0", "t1", "base", 0)


def test_requeued_cell_goes_ahead_of_new_pairs() -> None:
    q = CellQueue(cells(3), DurationBook({"t0": 3.0, "t1": 2.0, "t2": 1.0}))
    first = q.pop(0.0)
    second = q.pop(0.0)
    assert first is not None
    assert second is not None
    assert first.task == second.task == "t0"
    assert q.pop(0.0) == CellRef("t1/base/0", "t1", "base", 0)
    q.requeue(first)
    assert q.pop(0.0) == first  # retried at once
    assert q.pop(0.0) == CellRef("t1/mcp/0", "t1", "mcp", 0)  # then the open pair
    assert len(q) == 2


def test_observed_duration_overrides_history_and_unknown_uses_a_high_quantile() -> None:
    book = DurationBook({"a": 100.0}, prior_s=10.0, unknown_quantile=0.9)
    assert book.base("a") == 100.0
    assert book.base("zzz") == 10.0
    for s in range(1, 11):
        book.observe(f"x{s}", float(s * 100))
    assert book.base("zzz") == 1000.0  # the 90th percentile of what finished
    book.observe("a", 300.0)
    assert book.base("a") == 300.0
    assert book.known("a")
    assert book.known("x1")
    assert not book.known("zzz")


def test_running_long_task_jumps_ahead() -> None:
    book = DurationBook({"t0": 600.0, "t1": 500.0, "t2": 400.0})
    q = CellQueue(cells(3, arms=("a",), reps=2), book)
    c = q.pop(0.0)
    assert c is not None
    assert c.task == "t0"
    book.started("t2", "x", 0.0)  # pretend t2 rep 0 started elsewhere and runs long
    assert q.pop(100.0) is not None  # t1 rep0 (t0 rep1 is also 600 but started once)
    nxt = q.pop(10_000.0)
    assert nxt is not None
    assert nxt.task == "t2"
    assert book.stopped("t2", "x") == 0.0
    assert book.stopped("t2", "x") is None


def core(name: str, n: int, **kw: object) -> AccountCore:
    return AccountCore(name, AccountLimits(max_concurrent=n, **kw))  # type: ignore[arg-type]


def test_choose_account_prefers_headroom_and_probe_last() -> None:
    a, b, c = core("a", 8), core("b", 2), core("c", 4)
    for i in range(6):
        a.on_start(0.0, _lease(i, "a"))
    snaps = [x.snapshot(0.0) for x in (a, b, c)]
    assert choose_account(snaps) in {"b", "c"}  # a has 2/8 free; b 2/2 and c 4/4
    assert choose_account(snaps) == "c"  # equal fraction: more free slots
    c.on_finish(1.0, _lease(99, "c"), Outcome.rate_limited(10.0))
    b.on_finish(1.0, _lease(98, "b"), Outcome.auth_failed())
    snaps = [x.snapshot(1.0) for x in (a, b, c)]
    assert choose_account(snaps) == "a"
    snaps = [x.snapshot(61.0) for x in (a, b, c)]  # c is on probation now (base cooldown 60)
    assert snaps[2].state is HealthState.DEGRADED
    assert choose_account(snaps) == "a"
    for i in range(6, 8):
        a.on_start(61.0, _lease(i, "a"))
    assert choose_account([x.snapshot(61.0) for x in (a, b, c)]) == "c"
    assert choose_account([]) is None


def _lease(i: int, account: str) -> Lease:
    return Lease(f"{account}{i}", f"cell{i}", account)


def test_healthy_capacity_is_min_of_accounts_and_backend() -> None:
    a, b = core("a", 8), core("b", 4)
    b.on_finish(0.0, _lease(1, "b"), Outcome.auth_failed())
    snaps = [a.snapshot(0.0), b.snapshot(0.0)]
    assert healthy_capacity(snaps, None) == 8
    assert healthy_capacity(snaps, 5) == 5


def test_dispatcher_fills_accounts_and_requeues_rate_limited_to_another() -> None:
    accounts = [core("a", 2), core("b", 1)]
    d = Dispatcher(accounts, CellQueue(cells(3), DurationBook()))
    starts = d.dispatch(0.0)
    assert [s.lease.account for s in starts].count("a") == 2
    assert len(starts) == 3
    assert d.inflight == 3
    assert d.dispatch(0.0) == []
    on_b = next(s for s in starts if s.lease.account == "b")
    assert d.finish(10.0, on_b.lease, Outcome.rate_limited(300.0))
    assert len(d.queue) == 4
    # b cools; nothing frees on a: the run waits for a finish, it does not fail cells.
    assert d.dispatch(11.0) == []
    assert d.next_wakeup(11.0) == 310.0
    on_a = next(s for s in starts if s.lease.account == "a")
    assert not d.finish(20.0, on_a.lease, Outcome.success())
    again = d.dispatch(20.0)
    assert [(s.cell, s.lease.account) for s in again] == [(on_b.cell, "a")]


def test_dispatcher_respects_backend_slots() -> None:
    d = Dispatcher([core("a", 8)], CellQueue(cells(4), DurationBook()))
    assert len(d.dispatch(0.0, free_slots=3)) == 3
    assert len(d.dispatch(0.0, free_slots=0)) == 0


def test_dispatcher_waits_when_every_account_is_blocked() -> None:
    acc = core("a", 2, window=WindowLimit(1.0, max_cells=1))
    d = Dispatcher([acc], CellQueue(cells(1), DurationBook()))
    (s,) = d.dispatch(0.0)
    assert d.next_wakeup(1.0) == 3600.0
    d.finish(5.0, s.lease, Outcome.success())
    assert d.dispatch(6.0) == []
    assert len(d.dispatch(3600.0)) == 1


def test_plan_starts_from_snapshots_spends_each_accounts_headroom() -> None:
    a, b = core("a", 3), core("b", 1, starts_per_minute=60, burst=1)
    q = CellQueue(cells(4), DurationBook())
    plan = plan_starts(q, [a.snapshot(0.0), b.snapshot(0.0)], 0.0)
    assert sorted(acc for _, acc in plan) == ["a", "a", "a", "b"]
    assert len(q) == 4  # 8 cells, 4 planned
    q2 = CellQueue(cells(4), DurationBook())
    assert len(plan_starts(q2, [a.snapshot(0.0)], 0.0, free_slots=2)) == 2
    # The driver confirms each start with its account; a refusal sends the cell back.
    for i, (cell, acc) in enumerate(plan):
        (a if acc == "a" else b).on_start(0.0, Lease(f"p{i}", cell.cell_id, acc))
    assert plan_starts(q2, [a.snapshot(0.0), b.snapshot(0.0)], 0.0) == []
    assert len(q2) == 6


def test_token_bucket_caps_headroom() -> None:
    acc = core("a", 8, starts_per_minute=2, burst=2)
    d = acc.can_admit(0.0)
    assert d == Admit(headroom=2)
