"""Benchmark: the ``warp`` backend end to end (retarget + render + h264 encode + mux) at 720x1280.

Target: >= 60 fps end to end on 2 CPU cores (30 fps, real time, is the floor). The figure that
counts is ``fps``: frames / wall time of ``render_clip`` writing a real mp4, the best of
``repeats`` runs (other processes share the cores; the best run is the least disturbed one,
the median is reported too). Per-stage milliseconds say where the time goes:

- ``retarget_ms``: loop -> persona keypoints, per clip (amortized per frame in ``stages_ms``);
- ``field_ms``: control points, TPS solve, coarse field, face blend, upsample, fixed-point maps;
- ``remap_ms``: ``cv2.remap`` of the reachable region (compositing is folded into it);
- ``composite_ms``: filling the rest of the frame from the prefilled template;
- ``arms_ms``: the arm layers: ARAP solve per arm, triangle raster, map, remap, composite over
  the body (:mod:`newsmotion_engine.render.backends.warp.limbs`);
- ``pipe_ms``: writer thread: RGB -> yuv420p conversion and pipe writes (overlaps rendering);
- ``encode_ms``: CPU time ffmpeg (x264) spent per frame (a separate process, overlapping);
- ``encode_wait_ms``: time the renderer blocked because the encoder was behind.

``speaking``: the same clip rendered with a speech's viseme track (the lips, blinks and head
motion of :mod:`newsmotion_engine.render.backends.warp.face_motion`), one speaking run after each
silent run so both see the same load: its ``fps`` (best), ``fps_median``, ``render_only_fps`` and
``face_ms`` (mouth and eyelids per frame). The track is the first frames of the sample speech
``weather`` (eSpeak NG phonemes -> visemes), repeated when the clip is longer.
"""

from __future__ import annotations

import os
import platform
import resource
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from newsmotion_engine.render.base import RenderSpec, get_backend
from newsmotion_engine.render.clip import loop_canvas_size, render_clip
from newsmotion_engine.render.retarget import retarget
from newsmotion_engine.video.encode import DEFAULT_PRESET

__all__ = ["bench_warp", "TARGET_FPS", "FLOOR_FPS"]

TARGET_FPS = 60.0
FLOOR_FPS = 30.0


@dataclass
class _Loop:
    """A guidance stand-in with exactly ``frames`` frames (the loop repeated or cut)."""

    loop_id: str
    keypoints: np.ndarray
    fps: int
    width: int
    height: int

    @property
    def frames(self) -> int:
        return int(self.keypoints.shape[0])


def _children_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def bench_warp(
    guidance: Any,
    persona: Any,
    *,
    frames: int = 120,
    width: int = 720,
    height: int = 1280,
    threads: int = 2,
    repeats: int = 3,
    encoder: str = "auto",
    encoder_threads: int | None = None,
    encoder_preset: str | None = None,
    backend_config: dict[str, Any] | None = None,
    speaking: bool = True,
    log: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Benchmark the warp backend on one (loop, persona) pair.

    Args:
        guidance: a loaded loop (``loop_id``, ``keypoints`` ``[T, 133, 3]``, ``fps``); repeated or
            cut to ``frames`` frames.
        persona: a loaded persona (``portrait``, ``person_mask``, ``face_mask``, ``landmarks``).
        frames, width, height: clip length and output size (default 120 frames at 720x1280).
        threads: OpenCV threads for the backend (the machine has 2 cores; ffmpeg runs alongside).
        repeats: end-to-end runs; ``fps`` is the best, ``fps_median`` the median.
        encoder, encoder_threads, encoder_preset: passed to the encoder (``"auto"``: NVENC if it
            works, else libx264; preset ``None`` = the default, superfast).
        backend_config: extra ``WarpBackend`` settings (e.g. ``{"grid_step": 8}``).
        speaking: also time the clip rendered with a speech (``result["speaking"]``).
        log: progress lines (e.g. ``print``).

    Returns:
        ``{"benchmark": "warp", "fps": ..., "fps_median": ..., "render_only_fps": ...,
        "stages_ms": {...per frame...}, "retarget_ms": ..., "field_ms": ..., ...}`` (see the module
        docstring for the stages), plus the settings and the machine.

    Example::

        result = bench_warp(load_guidance(store, "welcome"), load_persona(store, "astronaut"))
        result["fps"]  # e.g. 95.0
    """
    say = log or (lambda _msg: None)
    spec = RenderSpec(width, height, fps=int(getattr(guidance, "fps", 30) or 30))
    kp = np.asarray(guidance.keypoints)
    reps = -(-frames // kp.shape[0])
    loop_w, loop_h = loop_canvas_size(guidance)
    loop = _Loop(
        loop_id=str(getattr(guidance, "loop_id", "loop")),
        keypoints=np.ascontiguousarray(np.concatenate([kp] * reps, axis=0)[:frames]),
        fps=spec.fps,
        width=loop_w,
        height=loop_h,
    )
    backend = get_backend("warp", threads=threads, **(backend_config or {}))
    backend.load()
    portrait_hw = np.asarray(persona.portrait).shape[:2]

    runs: list[dict[str, Any]] = []
    speaking_runs: list[dict[str, float]] = []
    visemes = speech_visemes(frames, spec.fps) if speaking else None
    load_before = round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None
    with tempfile.TemporaryDirectory(prefix="newsmotion-bench-warp-") as tmp:
        out = Path(tmp) / "bench.mp4"
        # Warm-up: page in the persona, prepare it, start the code paths once (not timed).
        render_clip(_Loop(loop.loop_id, loop.keypoints[:4], loop.fps, loop_w, loop_h), persona, backend, spec, out,
                    encoder=encoder, encoder_threads=encoder_threads, encoder_preset=encoder_preset)  # fmt: skip
        for i in range(max(1, repeats)):
            backend.reset_stats()
            cpu0 = _children_cpu_s()
            tele = render_clip(loop, persona, backend, spec, out, encoder=encoder, encoder_threads=encoder_threads, encoder_preset=encoder_preset)
            ffmpeg_cpu_ms = (_children_cpu_s() - cpu0) * 1e3
            st = dict(backend.stats)
            n = max(1, int(st["frames"]))
            run = {
                "fps": frames / tele.wall_s,
                "wall_s": tele.wall_s,
                "retarget_ms": tele.retarget_ms,
                "field_ms": st["field_ms"] / n,
                "remap_ms": st["remap_ms"] / n,
                "composite_ms": st["composite_ms"] / n,
                "arms_ms": st.get("arms_ms", 0.0) / n,
                "encode_ms": ffmpeg_cpu_ms / n,
                "encode_wait_ms": tele.encode_wait_ms / n,
                "mux_ms": tele.mux_ms,
                "encoder": tele.encoder,
            }
            runs.append(run)
            say(f"run {i + 1}/{repeats}: {run['fps']:.1f} fps end to end ({tele.encoder})")
            if visemes is not None:
                backend.reset_stats()
                tele = render_clip(loop, persona, backend, spec, out, encoder=encoder, encoder_threads=encoder_threads,
                                   encoder_preset=encoder_preset, visemes=visemes)  # fmt: skip
                speaking_runs.append({"fps": frames / tele.wall_s, "face_ms": backend.stats["face_ms"] / max(1, backend.stats["frames"])})
                say(f"run {i + 1}/{repeats} speaking: {speaking_runs[-1]['fps']:.1f} fps end to end")

    # Render alone (no encoder), to show what encoding costs on top.
    kp_r = retarget(loop.keypoints, persona.landmarks, loop_size=(loop_w, loop_h),
                    persona_size=(int(portrait_hw[1]), int(portrait_hw[0])))  # fmt: skip
    t0 = time.perf_counter()
    for _ in backend.frames(loop, persona, kp_r, spec):
        pass
    render_only_fps = frames / (time.perf_counter() - t0)
    speaking_result = None
    if visemes is not None:
        t0 = time.perf_counter()
        for _ in backend.frames(loop, persona, kp_r, spec, visemes=visemes):
            pass
        best_speaking = max(speaking_runs, key=lambda r: r["fps"])
        speaking_result = {
            "fps": round(best_speaking["fps"], 2),
            "fps_median": round(statistics.median(r["fps"] for r in speaking_runs), 2),
            "fps_runs": [round(r["fps"], 2) for r in speaking_runs],
            "render_only_fps": round(frames / (time.perf_counter() - t0), 2),
            "face_ms": round(best_speaking["face_ms"], 3),
            "face": backend.describe().get("last_render", {}).get("face"),
        }

    best = max(runs, key=lambda r: r["fps"])
    stages = {
        "retarget": best["retarget_ms"] / frames,
        "field": best["field_ms"],
        "remap": best["remap_ms"],
        "composite": best["composite_ms"],
        "arms": best["arms_ms"],
        "encode": best["encode_ms"],
        "encode_wait": best["encode_wait_ms"],
    }
    result: dict[str, Any] = {
        "benchmark": "warp",
        "fps": round(best["fps"], 2),
        "fps_median": round(statistics.median(r["fps"] for r in runs), 2),
        "fps_runs": [round(r["fps"], 2) for r in runs],
        "render_only_fps": round(render_only_fps, 2),
        "target_fps": TARGET_FPS,
        "floor_fps": FLOOR_FPS,
        "meets_target": best["fps"] >= TARGET_FPS,
        "meets_floor": best["fps"] >= FLOOR_FPS,
        "frames": frames,
        "width": width,
        "height": height,
        "threads": threads,
        "encoder": best["encoder"],
        "encoder_preset": encoder_preset or DEFAULT_PRESET,
        "loop_id": loop.loop_id,
        "persona_id": getattr(persona, "persona_id", None),
        "stages_ms": {k: round(v, 3) for k, v in stages.items()},
        "retarget_ms": round(best["retarget_ms"], 3),
        "field_ms": round(best["field_ms"], 3),
        "remap_ms": round(best["remap_ms"], 3),
        "composite_ms": round(best["composite_ms"], 3),
        "arms_ms": round(best["arms_ms"], 3),
        "encode_ms": round(best["encode_ms"], 3),
        "encode_wait_ms": round(best["encode_wait_ms"], 3),
        "mux_ms": round(best["mux_ms"], 1),
        "speaking": speaking_result,
        "backend_info": backend.describe(),
        "machine": {
            "cpus": os.cpu_count(),
            "affinity_cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
            "machine": platform.machine(),
            "python": platform.python_version(),
            "opencv": cv2.__version__,
            "date": time.strftime("%Y-%m-%d"),
            # How busy the (shared) machine was: 1-minute load average before and after.
            "loadavg_1m": [load_before, round(os.getloadavg()[0], 2)] if hasattr(os, "getloadavg") else None,
        },
    }
    backend.close()
    return result


def speech_visemes(frames: int, fps: int) -> Any:
    """``frames`` frames of the sample speech ``weather``'s viseme track (repeated if longer)."""
    from newsmotion_engine.speech.samples import SAMPLE_SPEECHES
    from newsmotion_engine.speech.visemes import visemes_from_phonemes

    synthesis = SAMPLE_SPEECHES["weather"].synthesize()
    track = visemes_from_phonemes(synthesis.phonemes, synthesis.duration_s, fps)
    reps = -(-frames // len(track))
    return type(track)(fps, *(np.tile(getattr(track, c), reps)[:frames] for c in ("open", "wide", "round", "energy")))


def headline(result: dict[str, Any]) -> dict[str, float]:
    """The figures people read from :func:`bench_warp`'s result."""
    out = {"fps, render + encode (best run)": result["fps"], "fps, median run": result["fps_median"],
           "fps, render alone": result["render_only_fps"]}  # fmt: skip
    if result.get("speaking"):
        out["fps speaking, render + encode (best run)"] = result["speaking"]["fps"]
        out["fps speaking, render alone"] = result["speaking"]["render_only_fps"]
    return out
