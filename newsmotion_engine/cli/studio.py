"""``newsmotion studio``: a static offline site to judge renders side by side."""

from __future__ import annotations

from typing import Annotated

import typer

from newsmotion_engine.cli.console import console
from newsmotion_engine.storage import Storage


studio_app = typer.Typer(help="The studio: a static offline site to judge renders side by side.", no_args_is_help=True)


@studio_app.command("build")
def studio_build_cmd(
    pose: Annotated[bool, typer.Option("--pose/--no-pose", help="Measure per-frame pose error on A/B pages (mediapipe on every frame; the slow part).")] = True,
) -> None:
    """Build the studio under storage/motion/studio/: index, a page per render, A/B pages, scorecard charts."""
    from newsmotion_engine.studio.site import build_studio

    store = Storage.from_env()
    report = build_studio(store, pose=pose, log=lambda message: console.print(f"  {message}"))
    for problem in report.problems:
        console.print(f"[yellow]warning:[/] {problem}")
    console.print(
        f"{report.renders} renders, {report.comparisons} A/B comparisons ({report.reused_comparisons} reused) -> {report.index}"
    )
    console.print("open it with `newsmotion studio serve` (or the file itself in a browser)")


@studio_app.command("serve")
def studio_serve_cmd(
    port: Annotated[int, typer.Option("--port", help="TCP port on 127.0.0.1.")] = 8765,
) -> None:
    """Serve the built studio on http://127.0.0.1:PORT/ until interrupted."""
    from newsmotion_engine.studio.server import serve_studio, studio_app as make_app

    store = Storage.from_env()
    make_app(store.studio_dir)  # fails with what to run when there is no site yet
    console.print(f"studio: http://127.0.0.1:{port}/  (Ctrl-C stops)")
    serve_studio(store.studio_dir, port=port)
