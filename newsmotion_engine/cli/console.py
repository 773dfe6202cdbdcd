"""What every command group shares: the console (complete tables when piped), progress bars,
id selection, option parsing, cell text."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import click
from rich.console import Console, ConsoleDimensions
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn


# Output that is not a terminal (a pipe, a file, CI logs) is laid out this wide.
PIPE_WIDTH = 10_000


class PipeConsole(Console):
    """A rich Console that never cuts text short when its output is not a terminal.

    Rich lays tables out for the terminal's width (80 columns when there is none) and ellipsizes
    cells that do not fit: ``newsmotion scorecard | grep`` saw "astron…". Piped output keeps the
    same table (people read logs too; ``--json`` is the machine format) but at a width no table
    reaches, so every cell is complete and no line is wrapped.
    """

    @property
    def size(self) -> ConsoleDimensions:
        size = super().size
        return size if self.is_terminal else ConsoleDimensions(PIPE_WIDTH, size.height)


console = PipeConsole()


def progress_bar() -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=False,
    )


def step_tasks(bar: Progress) -> Callable[[str], Callable[[int, int], None]]:
    """An ``on_step(label)`` for the engine's visible steps: each starts its own progress line."""

    def on_step(label: str) -> Callable[[int, int], None]:
        task = bar.add_task(label, total=None)
        return lambda done, total: bar.update(task, completed=done, total=total)

    return on_step


def selected_ids(
    what: str, given: list[str] | None, use_all: bool, every: Callable[[], list[str]], check: Callable[[str], object]
) -> list[str]:
    """The ids named on the command line, or ``every()`` with ``--all``; each is ``check``-ed
    (unknown or invalid ids fail) before any work starts."""
    if use_all == bool(given):
        raise click.UsageError(f"give {what} ids or --all (not both)")
    ids = every() if use_all else list(given or [])
    for cache_id in ids:
        check(cache_id)
    return ids


def human_bytes(n: int | float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def parse_options(pairs: list[str]) -> dict[str, Any]:
    """``["threads=2", "preset=\"tiny\""]`` -> ``{"threads": 2, "preset": "tiny"}`` (a value that is not
    JSON is taken as a string)."""
    options: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise click.UsageError(f"--option expects KEY=VALUE, got {pair!r}")
        try:
            options[key] = json.loads(value)
        except ValueError:
            options[key] = value
    return options


def cell(value: Any) -> str:
    from newsmotion_engine.render.telemetry import cell_text

    return cell_text(value)

