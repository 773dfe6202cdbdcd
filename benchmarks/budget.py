"""A lab bench's device-time budget over its variants.

A device command has a hard limit (10 minutes); a variant that starts near the end is killed
mid-render and its minutes measure nothing (found on the H100: mimicmotion's third variant began
at 351 s of a 520 s budget, ran past the command's 560 s limit, and was lost). So a variant starts
only when the budget still holds the longest variant measured so far.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

__all__ = ["SPENT", "VariantBudget"]

SPENT = "device-time budget of this run spent"


class VariantBudget:
    """``budget_s`` seconds from now (None: no limit). Call :meth:`next_variant` before each
    variant: it returns None to run it, or why it is skipped (the row's ``skipped``). The time
    between two calls counts as the earlier variant's."""

    def __init__(self, budget_s: float | None, *, clock: Callable[[], float] = time.perf_counter) -> None:
        self._clock = clock
        self.deadline = clock() + budget_s if budget_s else math.inf
        self.longest_s = 0.0
        self._started: float | None = None

    def next_variant(self) -> str | None:
        now = self._clock()
        if self._started is not None:
            self.longest_s = max(self.longest_s, now - self._started)
            self._started = None
        if now > self.deadline:
            return SPENT
        if now + self.longest_s > self.deadline:
            return (f"would overrun the device-time budget: {self.deadline - now:.0f} s left, "
                    f"the longest variant so far took {self.longest_s:.0f} s")  # fmt: skip
        self._started = now
        return None

    def spent(self) -> bool:
        """Past the deadline (for a measurement that is not a variant)."""
        return self._clock() > self.deadline
