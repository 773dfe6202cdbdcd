"""Stand-in A/B sides for run_sides' tests, in a module of their own so that the child processes
of the ``processes`` mode import only this (and the engine's runner), not the test module."""

from __future__ import annotations

import os
import time

from newsmotion_engine.errors import BadInputError


class Loaded:
    closed = False

    def close(self) -> None:
        self.closed = True


class Sleeper:
    """A side that sleeps in its render and returns when it ran (pickles: module-level class)."""

    def __init__(self, label: str, *, fail_setup: bool = False, fail_run: bool = False, die: bool = False):
        self.label, self.fail_setup, self.fail_run, self.die = label, fail_setup, fail_run, die

    def setup(self) -> Loaded:
        if self.fail_setup:
            raise BadInputError(self.label, "cannot load")
        return Loaded()

    def run(self, backend: Loaded) -> tuple[float, float]:
        if self.die:
            os._exit(3)
        start = time.time()
        time.sleep(0.3)
        if self.fail_run:
            raise ZeroDivisionError("a bug in the render")
        return start, time.time()
