"""``newsmotion loops``: the motion loop palette."""

from __future__ import annotations

import typer
from rich.table import Table

from newsmotion_engine.cli.console import console
from newsmotion_engine.storage import Storage


loops_app = typer.Typer(help="The motion loop palette.", no_args_is_help=True)


@loops_app.command("list")
def loops_list() -> None:
    """List the canonical loops and custom loops from driving videos."""
    from newsmotion_engine.guidance.cache import driving_loop_ids, find_driving_video
    from newsmotion_engine.guidance.catalogue import canonical_loops, is_canonical

    store = Storage.from_env()
    table = Table("loop", "source", "description")
    for loop_id, spec in canonical_loops().items():
        table.add_row(loop_id, "canonical", spec.description)
    for loop_id in driving_loop_ids(store):
        if not is_canonical(loop_id):
            table.add_row(loop_id, "driving video", str(find_driving_video(store, loop_id)))
    console.print(table)
