"""``newsmotion lips``: a rendered loop lip-synced to a speech through the MuseTalk stage."""

from __future__ import annotations

import dataclasses
import json
from typing import Annotated, Optional

import typer

from newsmotion_engine import cachedir
from newsmotion_engine.cli.console import console, parse_options, progress_bar, step_tasks
from newsmotion_engine.storage import Storage


def lips_cmd(
    persona: Annotated[str, typer.Option("--persona", help="Persona id.")],
    loop: Annotated[str, typer.Option("--loop", help="Loop id.")],
    speech: Annotated[str, typer.Option("--speech", help="Speech id (see `newsmotion speech list`).")],
    backend: Annotated[str, typer.Option("--backend", help="The backend whose render gets the lips.")] = "warp",
    width: Annotated[int, typer.Option(help="Output width (even).")] = 720,
    height: Annotated[int, typer.Option(help="Output height (even).")] = 1280,
    fps: Annotated[int, typer.Option(help="Output frame rate.")] = 30,
    option: Annotated[Optional[list[str]], typer.Option("--option", "-o", help="MuseTalk option KEY=VALUE: model_path, preset, device, dtype, batch_size, extra_margin.")] = None,
) -> None:
    """Lip-sync the render of LOOP on PERSONA to SPEECH with MuseTalk 1.5 (the render is made first
    when it is missing or stale). Writes storage/motion/renders/P/L/lips/BACKEND-musetalk-SPEECH.mp4
    with the speech as AAC, and its record (.json) beside it. Without `-o model_path=` the models
    have random weights: the lower face is noise, the plumbing is what runs."""
    from newsmotion_engine.render import RenderSpec, get_backend
    from newsmotion_engine.render.fidelity import FidelityConfig
    from newsmotion_engine.render.job import check_render_request, ensure_render_inputs, render_persona_loop
    from newsmotion_engine.render.musetalk.config import MuseTalkOptions
    from newsmotion_engine.render.musetalk.pipeline import lip_sync_render
    from newsmotion_engine.speech.cache import load_speech_cache

    store = Storage.from_env()
    opts = MuseTalkOptions.from_options(parse_options(option or []))
    check_render_request(store, persona, loop)
    spoken = load_speech_cache(store, speech)
    spec = RenderSpec(width=width, height=height, fps=fps)
    engine = get_backend(backend)
    engine.load()
    render_mp4 = store.render_path(persona, loop, backend)
    lips_dir = render_mp4.parent / "lips"
    lips_dir.mkdir(parents=True, exist_ok=True)
    out = lips_dir / f"{backend}-musetalk-{speech}.mp4"
    try:
        with progress_bar() as bar:
            inputs = ensure_render_inputs(store, persona, loop, engine, spec, on_step=step_tasks(bar))
            task = bar.add_task(f"silent render {persona} x {loop} ({backend})", total=None)
            render_persona_loop(store, persona, loop, engine, spec, inputs=inputs,
                                progress=lambda d, t: bar.update(task, completed=d, total=t),
                                fidelity=FidelityConfig(enabled=False))  # fmt: skip
            task = bar.add_task(f"lips: {speech} (MuseTalk)", total=spoken.frames)
            result = lip_sync_render(render_mp4, inputs.guidance, inputs.persona, spoken, out, opts,
                                     avatar_dir=lips_dir / f"{backend}-avatar",
                                     progress=lambda d, t: bar.update(task, completed=d, total=t))  # fmt: skip
    finally:
        engine.close()
    record = {**result.as_dict(), "persona": persona, "loop": loop, "speech": speech, "backend": backend,
              "options": dataclasses.asdict(opts)}  # fmt: skip
    with cachedir.replacing(out.with_suffix(".json")) as tmp:  # beside the mp4, whole or not at all
        tmp.write_text(json.dumps(record, indent=2) + "\n")
    console.print(f"{out}: {result.frames} frames, {result.redrawn} lower faces redrawn, stage {result.stage_fps} fps, "
                  f"weights: {result.weights}")  # fmt: skip
    if result.weights == "random weights":
        console.print("random weights: the redrawn lower face is noise; pass -o model_path=DIR (the MuseTalk 1.5 layout) for real lips")
