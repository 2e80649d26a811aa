from ray_bench.scheduler import CellQueue, CellRef, DurationBook


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


def test_cells_added_after_a_preflight_join_the_order() -> None:
    q = CellQueue(cells(1), DurationBook({"t0": 10.0, "t1": 99.0}))
    q.add(cells(2)[2:])
    assert drain(q) == ["t1/base/0", "t1/mcp/0", "t0/base/0", "t0/mcp/0"]


def test_split_prefers_short_for_the_others_and_long_for_window_slots() -> None:
    hist = {"t0": 4 * 3600.0, "t1": 3 * 3600.0, "t2": 600.0, "t3": 300.0}
    q = CellQueue(cells(4, arms=("a",)), DurationBook(hist))
    assert q.pop(0.0, split=3600.0).cell_id == "t2/a/0"  # the longest below the split
    assert q.pop(0.0, split=3600.0, long=True).cell_id == "t0/a/0"
    assert q.pop(0.0, split=3600.0).cell_id == "t3/a/0"
    # nothing short left: the others get the long cells rather than nothing
    assert q.pop(0.0, split=3600.0).cell_id == "t1/a/0"
    assert q.pop(0.0, split=3600.0) is None


def test_a_reserved_pairs_sibling_waits_for_a_window_slot() -> None:
    hist = {"t0": 4 * 3600.0, "t1": 600.0}
    q = CellQueue(cells(2), DurationBook(hist))
    assert q.pop(0.0, split=3600.0, long=True).cell_id == "t0/base/0"
    assert q.pop(0.0, split=3600.0).cell_id == "t1/base/0"  # not t0's sibling
    assert q.pop(0.0, split=3600.0, long=True).cell_id == "t0/mcp/0"


def test_unknown_tasks_are_explored_by_either_kind_of_slot() -> None:
    q = CellQueue(cells(2, arms=("a",)), DurationBook({"t1": 60.0}))
    assert q.pop(0.0, split=3600.0).cell_id == "t0/a/0"  # unknown: at a high quantile, first


def test_profile_and_work_follow_the_fresh_cells() -> None:
    book = DurationBook({"t0": 100.0, "t1": 10.0})
    q = CellQueue(cells(2, reps=2), book)
    assert list(q.profile()) == [(100.0, 4), (10.0, 4)]
    assert q.work() == 440.0
    q.pop(0.0)  # t0's first pair opens: its cells leave the profile, not the work estimate
    assert list(q.profile()) == [(100.0, 2), (10.0, 4)]
    assert q.work() == 240.0 + 1 * book.mean()
    book.observe("t1", 30.0)
    q.reprioritise("t1")
    assert list(q.profile()) == [(100.0, 2), (30.0, 4)]


def test_typical_is_the_median_task_not_the_median_of_what_finished_first() -> None:
    book = DurationBook({f"t{i}": 60.0 * (i + 1) for i in range(9)})
    for _ in range(5):
        book.observe("t8", 10 * 3600.0)  # longest first: the long task finishes first and often
    assert book.typical() == 300.0
    assert book.residual(0.0) == 0.0
    book.started("t0", "l1", now=0.0)
    assert book.residual(20.0) == 40.0
