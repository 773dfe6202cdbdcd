"""The variant budget: a variant starts only when the budget still holds the longest one so far."""

from __future__ import annotations

from benchmarks.budget import SPENT, VariantBudget


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_variant_that_would_overrun_is_skipped_with_why():
    clock = _Clock()
    budget = VariantBudget(520, clock=clock)
    assert budget.next_variant() is None  # stock, 110 s
    clock.now = 110
    assert budget.next_variant() is None  # ours, 240 s (warm-up and timed)
    clock.now = 351
    why = budget.next_variant()  # 169 s left < 241 s: the third would be cut by the command's limit
    assert why is not None and "169 s left" in why and "241 s" in why
    assert budget.longest_s == 241
    clock.now = 521
    assert budget.next_variant() == SPENT and budget.spent()


def test_no_budget_never_skips():
    clock = _Clock()
    budget = VariantBudget(None, clock=clock)
    for t in (0, 1e6, 2e6):
        clock.now = t
        assert budget.next_variant() is None
    assert not budget.spent()


def test_a_skipped_variant_adds_no_time():
    clock = _Clock()
    budget = VariantBudget(100, clock=clock)
    assert budget.next_variant() is None
    clock.now = 60
    assert budget.next_variant() is not None  # 40 s left < 60 s
    clock.now = 95
    assert budget.next_variant() is not None and budget.longest_s == 60  # the skipped one's 35 s are not a variant
