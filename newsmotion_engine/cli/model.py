"""``newsmotion model``: model checkpoints."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from newsmotion_engine.cli.console import console


model_app = typer.Typer(help="Model checkpoints.", no_args_is_help=True)


@model_app.command("check")
def model_check_cmd(folder: Annotated[Path, typer.Argument(help="A model folder: a diffusers checkpoint, or a zoo model's official layout.")]) -> None:
    """Whether FOLDER is a usable model folder, for which backend or stage: classes, configs, weights (headers only), defaults, options."""
    from newsmotion_engine.render.model_check import check_model

    found = check_model(folder)  # an unusable folder: one error line, exit 1
    table = Table("component", "class", "config", "weights (no tensor data read)", title=f"{folder}: {found.backend} ({found.layout})")
    for row in found.rows:
        table.add_row(*row)
    table.add_row("release", "", found.release, "")
    for key, value in found.defaults.items():
        table.add_row("default" if key != "warning" else "[yellow]warning[/]", key, str(value), "")
    table.add_row("options", "", found.options, "")
    console.print(table)
