"""``newsmotion model``: model checkpoints."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from newsmotion_engine.cli.console import console


model_app = typer.Typer(help="Model checkpoints.", no_args_is_help=True)


@model_app.command("check")
def model_check_cmd(folder: Annotated[Path, typer.Argument(help="A diffusers-format checkpoint folder.")]) -> None:
    """Whether FOLDER is a usable checkpoint, for which backend: classes, configs, weights (headers only), defaults."""
    from newsmotion_engine.render.backends.wan.model_check import check_model

    found = check_model(folder)  # an unusable folder: one error line, exit 1
    table = Table("component", "class", "config", "weights (safetensors headers)", title=f"{folder}: {found.backend} ({found.pipeline})")
    for row in found.rows:
        table.add_row(*row)
    table.add_row("release", "", found.release, "")
    for key, value in found.defaults.items():
        table.add_row("default" if key != "warning" else "[yellow]warning[/]", key, str(value), "")
    console.print(table)
