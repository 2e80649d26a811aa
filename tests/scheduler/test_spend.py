"""Spend admission for a run's limit (scheduler/spend.py): expected costs and reservations."""

from __future__ import annotations

import pytest

from ray_bench.models.plan import PlanCell
from ray_bench.scheduler.spend import DEFAULT_CELL_USD, Expected, SpendBook


def cell(task: str, arm: str = "base") -> PlanCell:
    return PlanCell(id=f"{task}/{arm}/1", task=task, arm=arm, rep=1, backend="local")


def test_expected_cost_is_history_then_the_role_bound_then_the_default() -> None:
    book = SpendBook(limit_usd=None, bounds={"base": 0.9})
    assert book.expected(cell("t1")) == Expected(0.9, "role bound")
    assert book.expected(cell("t1", "other")) == Expected(DEFAULT_CELL_USD, "default")
    book.finish("l1", "t1", "base", 0.2)
    book.finish("l2", "t1", "base", 0.4)
    assert book.expected(cell("t1")) == Expected(pytest.approx(0.3), "history")
    assert book.expected(cell("t2")) == Expected(pytest.approx(0.3), "history")  # the arm's mean
    # an attempt with no cost known (0) is no evidence of a cheap cell
    book.finish("l3", "t3", "other", 0.0)
    assert book.expected(cell("t3", "other")).basis == "default"


def test_the_room_left_counts_the_cells_running_at_what_they_are_now_expected_to_cost() -> None:
    book = SpendBook(limit_usd=1.0)
    assert book.room() == 1.0
    book.reserve("l1", cell("t1"))
    book.reserve("l2", cell("t2"))
    assert book.room() == pytest.approx(1.0 - 2 * DEFAULT_CELL_USD)
    # the first cost is in: the cells still running are held at it, not at the default
    book.finish("l0", "t0", "base", 0.45)
    assert book.room() == pytest.approx(1.0 - 0.45 - 2 * 0.45)
    book.finish("l1", "t1", "base", 0.35)
    assert book.room() == pytest.approx(1.0 - 0.8 - 0.4)  # t2 at the arm's mean
    book.finish("l2", "t2", "base", 0.1)
    assert book.room() == pytest.approx(0.1)
    assert "would pass the run's limit $1.00" in book.refusal(Expected(0.2, "history"))
    assert SpendBook(limit_usd=None).room() is None


def test_an_attempt_of_unknown_cost_is_charged_what_it_was_expected_to_cost_never_zero() -> None:
    book = SpendBook(limit_usd=1.0, bounds={"base": 0.3})
    book.reserve("l1", cell("t1"))
    charged = book.finish("l1", "t1", "base", None)  # tokens spent, no price for the model
    assert charged == pytest.approx(0.3)  # what the account's budget is charged too, never $0
    assert book.spent == pytest.approx(0.3) and book.unknown == 1
    assert book.expected(cell("t1")).basis == "role bound"  # no history learned from a guess
    assert book.room() == pytest.approx(0.7)
    book.reserve("l2", cell("t2"))
    assert book.finish("l2", "t2", "base", 0.05) == pytest.approx(0.05)
