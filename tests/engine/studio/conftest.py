"""Synthetic renders for the studio tests: small mp4s written with the engine's encoder and a
RenderTelemetry record beside each, exactly where renders live; no backend runs."""

from __future__ import annotations

import numpy as np

from newsmotion_engine.render.telemetry import RenderProvenance, RenderTelemetry
from newsmotion_engine.storage import Storage
from newsmotion_engine.video.encode import VideoEncoder


def clip_frames(frames: int, width: int, height: int, *, shift: int = 0):
    """A moving bar on chroma green; ``shift`` moves it, so two clips differ where it is."""
    for i in range(frames):
        rgb = np.zeros((height, width, 3), np.uint8)
        rgb[:] = (0, 177, 64)
        x = (i * 2 + shift) % max(1, width - 8)
        rgb[height // 4 : height // 2, x : x + 8] = (250, 120, 40)
        yield rgb


def write_clip(path, frames: int, width: int, height: int, *, shift: int = 0) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with VideoEncoder(path, width, height, 30) as enc:
        for rgb in clip_frames(frames, width, height, shift=shift):
            enc.write(rgb)


def make_render(
    storage: Storage, persona: str, loop: str, backend: str, *, frames: int = 12, width: int = 64, height: int = 112,
    shift: int = 0, weights: str = "none", telemetry_frames: int | None = None, extra_info: dict | None = None,
) -> RenderTelemetry:
    """Write ``renders/{persona}/{loop}/{backend}.mp4`` + ``.json``; returns the record."""
    mp4 = storage.render_path(persona, loop, backend)
    write_clip(mp4, frames, width, height, shift=shift)
    tele = RenderTelemetry(
        persona_id=persona, loop_id=loop, backend=backend, backend_info={"weights": weights, **(extra_info or {})},
        encoder="libx264", frames=telemetry_frames or frames, fps=30, width=width, height=height, background="#00B140",
        seed=0, fps_achieved=90.0 if backend == "warp" else 0.4, render_ms=120.0, retarget_ms=1.0, mux_ms=8.0,
        encode_wait_ms=2.0, wall_s=0.2 if backend == "warp" else 30.0, peak_rss_mb=300.0, output=str(mp4),
        created_at="2026-12-01T00:00:00+00:00", provenance=RenderProvenance("a" * 64, "b" * 64, "c" * 64, "hit", "hit"),
    )  # fmt: skip
    tele.write(mp4.with_suffix(".json"))
    return tele
