"""``newsmotion story render``: a story file -> one mp4 with sound."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from newsmotion_engine.cli.console import cell, console, parse_options, progress_bar, step_tasks
from newsmotion_engine.errors import BadInputError
from newsmotion_engine.storage import Storage

story_app = typer.Typer(help="Stories: a script (persona, speech, gesture cues) rendered as one clip with sound.",
                        no_args_is_help=True)  # fmt: skip


@story_app.command("render")
def render_cmd(
    story_file: Annotated[Path, typer.Argument(help="The story file (YAML; docs/stories.md).", metavar="STORY.yaml")],
    out: Annotated[Optional[Path], typer.Option("--out", help="Output .mp4 (default storage/motion/stories/PERSONA/STORY/BACKEND.mp4).")] = None,
    backend: Annotated[str, typer.Option("--backend", help="Render backend (see `newsmotion backends`).")] = "warp",
    option: Annotated[Optional[list[str]], typer.Option("--option", "-o", help="Backend option KEY=VALUE (JSON value), repeatable.")] = None,
    width: Annotated[int, typer.Option(help="Output width (even).")] = 720,
    height: Annotated[int, typer.Option(help="Output height (even).")] = 1280,
    force: Annotated[bool, typer.Option("--force", help="Render even when the clip is current (same inputs).")] = False,
    lip_sync: Annotated[bool, typer.Option("--lip-sync/--no-lip-sync", help="Score the clip's lip sync (needs mediapipe).")] = True,
    lips: Annotated[str, typer.Option("--lips", help="backend | musetalk: the backend's own (from the speech's visemes; echomimic-v3: from its audio) or MuseTalk 1.5's drawn over the backend's silent frames (docs/musetalk.md).")] = "backend",
    lips_option: Annotated[Optional[list[str]], typer.Option("--lips-option", help="MuseTalk option KEY=VALUE (as `newsmotion lips -o`): model_path, preset, device, dtype, batch_size, extra_margin, seed.")] = None,
) -> None:
    """Render a story: the speech (built from the story's text or audio when needed), the gesture
    loops chained with blended joins, lips from the speech (its visemes, or its audio for an
    audio-driven backend: echomimic-v3), the audio muxed as AAC.

    Missing or stale persona, loop and speech caches are built first, each as a visible step; a
    story whose inputs did not change is not rendered again. With `--lips musetalk` the backend
    renders silent and MuseTalk redraws the lower face from the speech; without
    `--lips-option model_path=DIR` its models have random weights (the lower face is noise).
    """
    from newsmotion_engine.render import RenderSpec, get_backend
    from newsmotion_engine.story.format import load_story
    from newsmotion_engine.render.lipsync import OFF_REASON
    from newsmotion_engine.render.musetalk import RANDOM_WEIGHTS_LABEL
    from newsmotion_engine.story.lips import story_lips
    from newsmotion_engine.story.render import check_story, check_story_backend, prepare_story, render_story

    store = Storage.from_env()
    musetalk = story_lips(lips, parse_options(lips_option or []))
    story = load_story(story_file)
    if out is not None and out.suffix.lower() != ".mp4":
        raise BadInputError(out, "output must be an .mp4 file")
    check_story(store, story)
    spec = RenderSpec(width=width, height=height)
    engine = get_backend(backend, **parse_options(option or []))
    check_story_backend(engine)
    engine.load()
    try:
        with progress_bar() as bar:
            inputs = prepare_story(store, story, spec, on_step=step_tasks(bar))
            task = bar.add_task(f"story {story.story_id} ({story.persona_id}, {backend}{', silent for MuseTalk' if musetalk else ''})",
                                total=inputs.speech.frames)  # fmt: skip
            tele = render_story(store, story, engine, spec, inputs=inputs, out_path=out, force=force, lip_sync=lip_sync,
                                lips=musetalk, on_step=step_tasks(bar),
                                progress=lambda d, t: bar.update(task, completed=d, total=t))  # fmt: skip
            if tele.outcome == "skipped":
                bar.update(task, visible=False)
    finally:
        engine.close()
    if tele.outcome == "skipped":
        console.print(f"{tele.output}: current (same inputs as the render of {tele.created_at}), not rendered again; --force renders it anyway")
        return
    sync = tele.av_sync
    console.print(
        f"{tele.output}: {tele.duration_s:.2f} s, {tele.frames} frames {tele.width}x{tele.height} @ {tele.fps} fps, "
        f"{len(tele.parts)} parts, rendered in {tele.wall_s:.1f} s ({tele.realtime_factor:.2f}x real time)"
        + (f", weights: {tele.weights}" if tele.weights else "")
        + f", lips: {tele.lips_label}"
    )
    console.print(
        f"audio: {sync['audio_codec'] or 'none'}, audio {sync['audio_s']} s vs video {sync['video_s']} s, "
        f"offset {sync['offset_frames']} frames ({'in sync' if sync['in_sync'] else 'OUT OF SYNC'}); "
        f"joins: largest joint move {tele.joins['max_jump_at_joins_px']} px at joins, {tele.joins['max_jump_inside_px']} px inside loops"
    )
    if tele.musetalk is not None and tele.musetalk["weights"] == RANDOM_WEIGHTS_LABEL:
        console.print("MuseTalk has random weights: the redrawn lower face is noise; "
                      "--lips-option model_path=DIR (the MuseTalk 1.5 layout) gives real lips")  # fmt: skip
    lips = tele.lip_sync
    if lips is None:  # OFF_REASON says "not measured" itself
        reason = tele.lip_sync_reason
        console.print(f"lip sync: {reason}" if reason == OFF_REASON else f"lip sync: not measured ({reason})")
    else:
        console.print(f"lip sync: correlation {cell(lips['correlation'])} at offset {lips['offset_frames']} frames "
                      f"over {lips['frames_measured']} frames" + ("" if lips["meets_targets"] else f" (targets: {lips['targets']})"))  # fmt: skip
