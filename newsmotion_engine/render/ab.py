"""A/B: the same persona x loop rendered by two configured backends (or two configurations of
one), then compared frame by frame (:mod:`newsmotion_engine.video.compare`).

Each side is an :class:`ABSide` (label, backend name, options as the resource / CLI give them).
The sides render one after the other: where each side fills the GPU, two CUDA streams or two
processes gain nothing over serial (``python -m benchmarks.animate2 --part multistream``,
``benchmarks/results/wan_animate_2_multistream_h200.json``). Each backend
is loaded, its sub-caches made current (``ensure_render_inputs``, as ``newsmotion render`` does:
the backend caches of the Dagster graph belong to the renderer resource's one backend), rendered
with :func:`render_persona_loop` to ``storage.ab_dir(persona, loop)/{label}.mp4`` (an unchanged
clip is skipped by its input digest), and closed before the other side loads.

    result = run_ab(storage, "anna", "nod", ABSide("v1", "wan-animate"), ABSide("v2", "wan-animate-2"), spec)
    result.comparison.summary()
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from newsmotion_engine.errors import BadInputError
from newsmotion_engine.ids import validate_id
from newsmotion_engine.render.base import RenderSpec, get_backend
from newsmotion_engine.render.job import ensure_render_inputs, render_persona_loop
from newsmotion_engine.render.telemetry import RenderTelemetry
from newsmotion_engine.storage import Storage
from newsmotion_engine.video.compare import VideoComparison, compare_videos

__all__ = ["ABResult", "ABSide", "run_ab"]

COMPARISON_NAME = "comparison.json"


@dataclass(frozen=True)
class ABSide:
    """One side: a slug ``label`` (the clip's file name), a registered backend and its options."""

    label: str
    backend: str
    options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        validate_id(self.label, "A/B label")


@dataclass
class ABResult:
    clips: dict[str, Path]
    telemetry: dict[str, RenderTelemetry]
    comparison: VideoComparison
    path: Path


def run_ab(storage: Storage, persona_id: str, loop_id: str, a: ABSide, b: ABSide, spec: RenderSpec, *,
           force: bool = False, log: Callable[[str], None] = lambda _msg: None) -> ABResult:  # fmt: skip
    """Render both sides, compare, write ``comparison.json`` (atomically). Raises the render
    path's errors (bad ids, missing caches, backend options) before anything is written."""
    if a.label == b.label:
        raise BadInputError(Path(storage.ab_dir(persona_id, loop_id)), f"both A/B sides are labelled {a.label!r}; give two labels")
    out_dir = storage.ab_dir(persona_id, loop_id)
    clips, tele = {}, {}
    for side in (a, b):
        backend = get_backend(side.backend, **side.options)  # options validated before any load
        try:
            backend.load()
            ensure_render_inputs(storage, persona_id, loop_id, backend, spec)
            out = out_dir / f"{side.label}.mp4"
            out.parent.mkdir(parents=True, exist_ok=True)
            tele[side.label] = render_persona_loop(storage, persona_id, loop_id, backend, spec, out_path=out, force=force)
            clips[side.label] = out
            log(f"{side.label} ({side.backend}): {tele[side.label].outcome} -> {out}")
        finally:
            backend.close()
    comparison = compare_videos(clips[a.label], clips[b.label], labels=(a.label, b.label))
    comparison.extra = {
        "persona": persona_id,
        "loop": loop_id,
        "sides": {s.label: {"backend": s.backend, "options": {k: str(v) for k, v in s.options.items()},
                            "weights": tele[s.label].weights, "input_digest": tele[s.label].input_digest}
                  for s in (a, b)},  # fmt: skip
    }
    path = comparison.write(out_dir / COMPARISON_NAME)
    return ABResult(clips, tele, comparison, path)
