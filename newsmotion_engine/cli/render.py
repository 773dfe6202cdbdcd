"""``newsmotion render`` and ``newsmotion backends``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import click
import typer

from newsmotion_engine.cli.console import cell, console, parse_options, progress_bar, step_tasks
from newsmotion_engine.errors import BadInputError
from newsmotion_engine.storage import Storage


def render_cmd(
    persona: Annotated[str, typer.Option("--persona", help="Persona id.")],
    loop: Annotated[str, typer.Option("--loop", help="Loop id.")],
    backend: Annotated[str, typer.Option("--backend", help="Render backend (see `newsmotion backends`).")] = "warp",
    out: Annotated[Optional[Path], typer.Option("--out", help="Output .mp4 (default storage/motion/renders/P/L/BACKEND.mp4).")] = None,
    width: Annotated[int, typer.Option(help="Output width (even).")] = 720,
    height: Annotated[int, typer.Option(help="Output height (even).")] = 1280,
    fps: Annotated[int, typer.Option(help="Output frame rate.")] = 30,
    background: Annotated[str, typer.Option(help="Background colour #RRGGBB (default chroma green).")] = "#00B140",
    keyframes: Annotated[int, typer.Option(help="Generate every N-th frame and infill the rest by optical flow (1 = every frame).")] = 1,
    option: Annotated[Optional[list[str]], typer.Option("--option", "-o", help="Backend option KEY=VALUE (JSON value), repeatable.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Render even when the clip is current (same inputs).")] = False,
    fidelity: Annotated[bool, typer.Option("--fidelity/--no-fidelity", help="Measure pose fidelity on the clip (needs mediapipe).")] = True,
    fidelity_stride: Annotated[int, typer.Option(help="Pose fidelity: compare every N-th frame.")] = 4,
) -> None:
    """Render one loop performed by one persona to an mp4 (+ telemetry JSON beside it).

    Caches that are missing or stale are built first, each as a visible step, through the same
    functions the Dagster cache assets call; a clip whose inputs did not change is not rendered again.
    An audio-driven backend performs a speech of this storage: `-o speech=ID` (echomimic-v3), the
    clip then lasting the speech.
    """
    from newsmotion_engine.render import RenderSpec, get_backend
    from newsmotion_engine.render.fidelity import FidelityConfig
    from newsmotion_engine.render.job import check_render_request, ensure_render_inputs, render_persona_loop, storage_backend_options

    store = Storage.from_env()
    spec = RenderSpec(width=width, height=height, fps=fps, background=background, keyframes=keyframes)
    try:
        fidelity_config = FidelityConfig(enabled=fidelity, stride=fidelity_stride)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--fidelity-stride") from None
    if out is not None and out.suffix.lower() != ".mp4":
        raise BadInputError(out, "output must be an .mp4 file")
    engine = get_backend(backend, **storage_backend_options(store, parse_options(option or [])))
    check_render_request(store, persona, loop, out)
    engine.load()
    try:
        with progress_bar() as bar:
            inputs = ensure_render_inputs(store, persona, loop, engine, spec, on_step=step_tasks(bar))
            task = bar.add_task(f"{persona} x {loop} ({backend})", total=None)
            tele = render_persona_loop(
                store, persona, loop, engine, spec, inputs=inputs, out_path=out, force=force,
                progress=lambda d, t: bar.update(task, completed=d, total=t), fidelity=fidelity_config,
            )
            if tele.outcome == "skipped":
                bar.update(task, visible=False)
    finally:
        engine.close()
    if tele.outcome == "skipped":
        console.print(f"{tele.output}: current (same inputs as the render of {tele.created_at}), not rendered again; --force renders it anyway")
        return
    console.print(
        f"{tele.output}: {tele.frames} frames {tele.width}x{tele.height} @ {tele.fps} fps, "
        f"{tele.fps_achieved:.1f} fps achieved, encoder {tele.encoder}"
        + (f", weights: {tele.weights}" if tele.weights else "")
    )
    pf = tele.pose_fidelity
    if pf is not None:
        console.print(
            f"pose fidelity: pck {cell(pf.pck_body)} (head, torso, arms; all parts {cell(pf.pck)}), motion energy "
            f"{cell(pf.motion_energy_ratio)}, mean error {cell(pf.mean_px)} px over {pf.frames_compared} frames"
            + ("" if pf.meets_targets else f" (targets: pck >= {pf.targets['pck_body']}, motion energy >= {pf.targets['motion_energy_ratio']})")
        )
    else:
        console.print(f"pose fidelity: not measured ({tele.pose_fidelity_reason})")


def backends_cmd() -> None:
    """List the registered render backends."""
    from newsmotion_engine.render import available_backends

    for name in available_backends():
        console.print(name)
