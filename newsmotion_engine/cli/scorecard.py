"""``newsmotion scorecard``: every render's telemetry plus the benchmark results."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from newsmotion_engine.cli.console import console
from newsmotion_engine.storage import Storage


def scorecard_cmd(
    json_path: Annotated[Optional[Path], typer.Option("--json", help="Also write the scorecard records here.")] = None,
) -> None:
    """Every render's telemetry plus benchmark results; exported to storage/motion/scorecards/{date}.json/.csv."""
    from newsmotion_engine.bench.scorecard import build_scorecard, export_scorecard
    from newsmotion_engine.render.telemetry import RenderTelemetry, cell_text

    store = Storage.from_env()
    frame = build_scorecard(store, on_skip=lambda message: console.print(f"[yellow]warning:[/] {message}"))
    exported = export_scorecard(store, frame)
    if json_path is not None:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(frame.to_json(orient="records", indent=2))
    renders = frame[frame["kind"] == "render"]
    columns = RenderTelemetry.SUMMARY
    table = Table(*(c.replace("_", " ") for c in columns))
    for row in renders.to_dict("records"):
        table.add_row(*(cell_text(row.get(c)) for c in columns))
    console.print(table)
    console.print(f"{len(renders)} renders, {len(frame) - len(renders)} benchmark rows -> {exported[0]}, {exported[1]}")
