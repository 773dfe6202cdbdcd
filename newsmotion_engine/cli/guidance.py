"""``newsmotion guidance``: Tier-1 motion guidance caches."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from newsmotion_engine.cli.console import console, progress_bar, selected_ids
from newsmotion_engine.errors import BadInputError, NewsmotionError
from newsmotion_engine.storage import Storage


guidance_app = typer.Typer(help="Tier-1 motion guidance caches.", no_args_is_help=True)


@guidance_app.command("build")
def guidance_build(
    loops: Annotated[Optional[list[str]], typer.Argument(help="Loop ids (default with --all: every loop).")] = None,
    all_loops: Annotated[bool, typer.Option("--all", help="Build every known loop.")] = False,
    force: Annotated[bool, typer.Option("--force", help="Rebuild even when the cache is current.")] = False,
) -> None:
    """Build (or reuse when current) guidance caches."""
    from newsmotion_engine.guidance.cache import all_loop_ids, check_loop_exists, ensure_guidance

    store = Storage.from_env()
    ids = selected_ids("loop", loops, all_loops, lambda: all_loop_ids(store), lambda i: check_loop_exists(store, i))
    table = Table("loop", "frames", "fps", "source", "action")
    with progress_bar() as bar:
        overall = bar.add_task("guidance caches", total=len(ids))
        for loop_id in ids:
            frames_task = bar.add_task(f"  {loop_id}", total=None)

            def on_progress(done: int, total: int, task=frames_task) -> None:
                bar.update(task, completed=done, total=total)

            cache, rebuilt = ensure_guidance(store, loop_id, force=force, progress=on_progress)
            bar.update(frames_task, completed=cache.frames, total=cache.frames, visible=False)
            bar.advance(overall)
            table.add_row(loop_id, str(cache.frames), str(cache.fps), cache.source_kind, "built" if rebuilt else "current")
    console.print(table)


@guidance_app.command("extract")
def guidance_extract(
    video: Annotated[Path, typer.Argument(help="A driving video of a person performing the gesture.")],
    loop_id: Annotated[str, typer.Option("--loop-id", help="Id of the new loop (a slug).")],
    force: Annotated[bool, typer.Option("--force", help="Replace an existing custom loop of that id.")] = False,
) -> None:
    """Add a custom loop: extract whole-body keypoints from VIDEO, cache them, and keep the video in
    motion/driving/ so the loop is rebuilt if the video changes."""
    from newsmotion_engine import cachedir
    from newsmotion_engine.guidance.cache import VIDEO_SUFFIXES, ensure_guidance, find_driving_video
    from newsmotion_engine.guidance.catalogue import is_canonical
    from newsmotion_engine.ids import validate_id

    store = Storage.from_env()
    validate_id(loop_id, "loop id")
    if is_canonical(loop_id):
        raise NewsmotionError(f"loop id {loop_id!r} is a canonical loop; choose another id")
    if not video.is_file():
        raise BadInputError(video, "driving video not found")
    suffix = video.suffix.lower()
    if suffix not in VIDEO_SUFFIXES:
        raise BadInputError(video, f"unsupported video type {suffix or '(none)'}; use one of {', '.join(VIDEO_SUFFIXES)}")
    existing = find_driving_video(store, loop_id)
    if existing is not None and not force and existing.resolve() != video.resolve():
        raise NewsmotionError(f"loop {loop_id!r} already exists ({existing}); pass --force to replace it")
    with progress_bar() as bar:
        task = bar.add_task(f"extracting {video.name}", total=None)
        cache, _ = ensure_guidance(
            store, loop_id, video=video, force=True, progress=lambda d, t: bar.update(task, completed=d, total=t)
        )
    # Keep the source beside the other driving videos only after extraction succeeded, so a bad
    # video leaves nothing behind; copy-then-rename keeps a watching sensor from seeing half a file.
    target = store.driving_dir / f"{loop_id}{suffix}"
    if existing is not None and existing != target:
        existing.unlink()
    if video.resolve() != target.resolve():
        cachedir.copy_into_place(video, target)
    console.print(f"loop [bold]{loop_id}[/]: {cache.frames} frames at {cache.fps} fps -> {cache.path}")
