"""One render, persona x loop, from ids: make sure both caches are current, then render.

Shared by the CLI and the Dagster ``render`` asset so both treat caches the same way: a current
cache is memory-mapped (a cache hit); a missing, corrupt or stale one is rebuilt first (never a
silently wrong video) and the telemetry says so.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from newsmotion_engine import storage
from newsmotion_engine.errors import NewsmotionError
from newsmotion_engine.render.base import Backend, RenderSpec
from newsmotion_engine.render.clip import render_clip


def ensure_guidance(loop_id: str):
    """``(GuidanceCache, rebuilt)`` — reused when current, rebuilt when missing/corrupt/stale."""
    from newsmotion_engine.guidance.cache import build_guidance

    return build_guidance(loop_id)


def ensure_persona(persona_id: str):
    """``(PersonaCache, rebuilt)`` from the persona's source portrait in ``personas/sources/``."""
    from newsmotion_engine.persona.cache import build_persona

    source = storage.find_persona_source(persona_id)
    if source is None:
        raise NewsmotionError(
            f"unknown persona {persona_id!r}: no source portrait in {storage.persona_sources()} "
            f"(add one with `newsmotion persona add IMAGE --id {persona_id}`)"
        )
    return build_persona(source, persona_id)


def preflight(persona_id: str, loop_id: str, backend_name: str, out_path: Path | None = None) -> Path:
    """Fail fast, before any work: ids valid, the loop and persona exist, the output folder is
    writable. Returns the output path."""
    from newsmotion_engine.guidance.cache import loop_source
    from newsmotion_engine.video.encode import check_output_folder

    loop_source(loop_id)
    if storage.find_persona_source(persona_id) is None:
        raise NewsmotionError(
            f"unknown persona {persona_id!r}: no source portrait in {storage.persona_sources()} "
            f"(add one with `newsmotion persona add IMAGE --id {persona_id}`)"
        )
    if out_path is None:
        out_path = storage.render_path(persona_id, loop_id, backend_name)
        out_path.parent.mkdir(parents=True, exist_ok=True)
    return check_output_folder(out_path)


def render_persona_loop(
    persona_id: str,
    loop_id: str,
    backend: Backend,
    spec: RenderSpec,
    *,
    out_path: Path | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """Render ``loop_id`` performed by ``persona_id`` to ``out_path`` (default
    ``motion/renders/{persona}/{loop}/{backend}.mp4``); returns the telemetry dict, which records
    whether each cache was a hit or had to be rebuilt."""
    out_path = preflight(persona_id, loop_id, backend.name, out_path)
    guidance, guidance_rebuilt = ensure_guidance(loop_id)
    persona, persona_rebuilt = ensure_persona(persona_id)
    return render_clip(
        guidance,
        persona,
        backend,
        spec,
        out_path,
        progress=progress,
        extra_telemetry={
            "guidance_cache": "rebuilt" if guidance_rebuilt else "hit",
            "persona_cache": "rebuilt" if persona_rebuilt else "hit",
        },
    )
