"""Calibration against real weights: TeaCache's rescale polynomial, and the quality of the
approximations that ship off by default (pyramid cascade, block-sparse attention, sparse keyframes;
wan-animate-2's fitted segments).

:func:`calibrate_approximation` renders a user's persona x loop exactly and with each setting of
one approximation and reports PSNR / SSIM per frame against the exact run (``newsmotion calibrate
pyramid | sparse-attention | keyframes | fit-segments | cudnn-attention``): the number a user with real weights needs before
turning one on. :func:`calibrate_teacache` fits TeaCache's polynomial from a recorded full run:

TeaCache decides to skip a transformer call from the relative change of the modulated timestep
embedding, mapped through a polynomial onto the expected relative change of the model output.
That mapping depends on the weights, so the identity default is only a placeholder: this records a
full render (every step computed, pairs of (embedding change, output change) kept by the hook)
and fits the polynomial with least squares (TeaCache, Liu et al. 2024, arXiv:2411.19108).
"""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from newsmotion_engine.errors import NewsmotionError
from newsmotion_engine.render.base import RenderSpec
from newsmotion_engine.storage import Storage


TEACACHE_BACKENDS = ("wan-animate", "wan-animate-2")


def calibrate_teacache(
    storage: Storage,
    persona_id: str,
    loop_id: str,
    options: dict[str, Any],
    spec: RenderSpec,
    *,
    degree: int = 4,
    backend_name: str = "wan-animate",
    on_step: Callable[[str], Callable[[int, int], None]] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """Render ``loop_id`` on ``persona_id`` with every step computed while recording, then fit.
    ``backend_name``: ``"wan-animate"`` or ``"wan-animate-2"`` (its base schedule: TeaCache
    applies there only).

    Like ``newsmotion render``, caches that are missing or stale are built first (as visible steps
    through ``on_step``, see :func:`~newsmotion_engine.render.job.ensure_render_inputs`), the
    backend's sub-caches included.

    ``options`` is the backend's flat options mapping (CLI ``-o``); the run uses them with
    ``TeaCache(threshold=0, record=True)`` in place of any TeaCache setting. Returns
    ``{"coefficients", "degree", "pairs", "fit_rel_rmse", "weights", "options", ...}``; use the
    coefficients as the backend option ``teacache_coefficients`` with ``teacache > 0``.
    """
    from newsmotion_engine.accel.teacache import TeaCache, fit_rescale, recorded_pairs
    from newsmotion_engine.render import get_backend
    from newsmotion_engine.render.base import validate_options
    from newsmotion_engine.render.job import ensure_render_inputs, render_persona_loop

    if backend_name not in TEACACHE_BACKENDS:
        raise NewsmotionError(f"TeaCache calibration: backend {backend_name!r} has no TeaCache; use one of {', '.join(TEACACHE_BACKENDS)}")
    opts = validate_options(backend_name, options)
    given = opts.accel(TeaCache)
    if given is not None and given.threshold > 0:
        raise NewsmotionError("calibration records a full run: leave the teacache option out (or 0)")
    backend = get_backend(backend_name, **{**options, "teacache": 0.0, "teacache_record": True})
    backend.load()
    try:
        inputs = ensure_render_inputs(storage, persona_id, loop_id, backend, spec, on_step=on_step)
        with tempfile.TemporaryDirectory(prefix="newsmotion-calibrate-") as tmp:
            tele = render_persona_loop(
                storage, persona_id, loop_id, backend, spec, inputs=inputs, out_path=Path(tmp) / "recorded.mp4",
                force=True, progress=progress,
            )
        pairs = recorded_pairs(backend.components.transformer)
        info = backend.describe()
    finally:
        backend.close()
    try:
        coefficients = fit_rescale(pairs, degree)
    except ValueError as exc:
        raise NewsmotionError(f"TeaCache calibration: {exc} (more steps or a lower --degree)") from None
    x, y = np.asarray(pairs, dtype=np.float64).T
    residual = np.polyval(coefficients, x) - y
    return {
        "calibration": "teacache",
        "backend": backend_name,
        "coefficients": list(coefficients),
        "degree": degree,
        "pairs": len(pairs),
        "embedding_change_range": [float(x.min()), float(x.max())],
        "fit_rel_rmse": float(np.sqrt(np.mean(residual**2)) / max(float(np.abs(y).mean()), 1e-12)),
        "weights": info.get("weights"),
        "options": {k: v for k, v in options.items() if k != "teacache_record"},
        "persona_id": persona_id,
        "loop_id": loop_id,
        "size": [spec.width, spec.height],
        "render_wall_s": tele.wall_s,
    }


# Approximations whose picture quality needs real weights to judge: each is rendered beside the
# exact run and compared frame by frame. Per approximation: the backend and its flat option key (CLI -o).
APPROXIMATIONS: dict[str, tuple[str, str]] = {
    "pyramid": ("wan-animate", "pyramid_low_steps"),
    "sparse-attention": ("wan-animate", "sparse_attention"),
    "keyframes": ("wan-animate", "keyframes"),  # a render-level setting (RenderSpec.keyframes), not a backend option
    # Shorter segments are another generation (noise of another shape), not a reconstruction of
    # the 81-frame one: PSNR against it says little; pose fidelity and a look at both clips do.
    "fit-segments": ("wan-animate-2", "fit_segments"),
    # cuDNN's FP8 attention (E4M3 Q/K/V/P/output): faster than the default 8-bit kernel, with 1.5x
    # its error on random inputs (benchmarks/results/attention_cudnn_h100.json); off by default.
    "cudnn-attention": ("wan-animate-2", "attention"),
}
# Why PSNR / SSIM against the default run is not the judge, where it is not.
_DIFFERENT_SAMPLE = {
    "fit-segments": "each setting is a different sample (its noise has another shape): judge by pose fidelity and by eye, "
                    "not by PSNR against the default run",
}  # fmt: skip


def calibrate_approximation(
    storage: Storage,
    persona_id: str,
    loop_id: str,
    options: dict[str, Any],
    spec: RenderSpec,
    *,
    approximation: str,
    values: list[Any],
    on_step: Callable[[str], Callable[[int, int], None]] | None = None,
    progress: Callable[[str], Callable[[int, int], None]] | None = None,
) -> dict[str, Any]:
    """Render ``loop_id`` on ``persona_id`` exactly, then with ``approximation`` at each of
    ``values``, and compare every frame with the exact run: PSNR / SSIM (mean and worst frame)
    and the wall-time speed-up, per value.

    ``approximation``: ``"pyramid"`` (values: ``pyramid_low_steps``), ``"sparse-attention"``
    (values: densities), ``"keyframes"`` (values: keyframe ratios) — wan-animate — or
    ``"fit-segments"`` (values: ``[True]``; wan-animate-2) or ``"cudnn-attention"`` (values:
    ``["fp8-cudnn"]``, against the default attention; wan-animate-2). ``options`` is the flat mapping of that
    backend (CLI ``-o``: ``model_path=...``, ``steps``...); the approximation's own keys must not be
    in it. Every run also reports its pose fidelity (re-extracted from the clip; ``None`` with the
    reason where mediapipe is missing). With random weights the numbers measure numerical drift
    only: every result carries the weights label.
    """
    from newsmotion_engine.render import get_backend
    from newsmotion_engine.render.base import validate_options
    from newsmotion_engine.render.job import ensure_render_inputs, render_persona_loop

    if approximation not in APPROXIMATIONS:
        raise NewsmotionError(f"unknown approximation {approximation!r}: use one of {', '.join(APPROXIMATIONS)}")
    backend_name, key = APPROXIMATIONS[approximation]
    if key in options:
        raise NewsmotionError(f"calibration compares against the exact run: leave {key} out of the options")
    if not values:
        raise NewsmotionError(f"calibrate {approximation}: give at least one value to try")
    runs: list[tuple[str, dict[str, Any], RenderSpec]] = [("exact", dict(options), spec)]
    for v in values:
        if key == "keyframes":
            runs.append((f"keyframes={v}", dict(options), dataclasses.replace(spec, keyframes=v)))
        else:
            runs.append((f"{key}={v}", {**options, key: v}, spec))
    for _, opts, _ in runs:  # a bad value is refused before the first render, not after the exact one
        validate_options(backend_name, opts)
    results: dict[str, Any] = {}
    weights = None
    with tempfile.TemporaryDirectory(prefix="newsmotion-calibrate-") as tmp:
        paths = {}
        for name, opts, run_spec in runs:
            backend = get_backend(backend_name, **opts)
            backend.load()
            try:
                inputs = ensure_render_inputs(storage, persona_id, loop_id, backend, run_spec, on_step=on_step)
                out = Path(tmp) / f"{len(paths)}.mp4"
                tele = render_persona_loop(storage, persona_id, loop_id, backend, run_spec, inputs=inputs, out_path=out,
                                           force=True, progress=progress(name) if progress else None)  # fmt: skip
                weights = backend.describe().get("weights")
            finally:
                backend.close()
            paths[name] = out
            fid = tele.pose_fidelity
            results[name] = {"wall_s": tele.wall_s, "pose_pck_body": fid.pck_body if fid else None,
                             "motion_energy_ratio": fid.motion_energy_ratio if fid else None,
                             "pose_fidelity_reason": None if fid else tele.pose_fidelity_reason}  # fmt: skip
        exact_s = results["exact"]["wall_s"]
        for name, _, _ in runs[1:]:
            results[name].update(_compare_clips(paths["exact"], paths[name]))
            results[name]["speedup_vs_exact"] = round(exact_s / results[name]["wall_s"], 3) if results[name]["wall_s"] else None
    return {
        "calibration": approximation,
        "backend": backend_name,
        "option": key,
        "judge_by": _DIFFERENT_SAMPLE.get(approximation, "PSNR / SSIM of every frame against the exact run"),
        "values": values,
        "runs": results,
        "weights": weights,
        "options": options,
        "persona_id": persona_id,
        "loop_id": loop_id,
        "size": [spec.width, spec.height],
    }


def _compare_clips(reference: Path, other: Path) -> dict[str, Any]:
    """PSNR / SSIM of ``other``'s frames against ``reference``'s, streamed (two frames in memory)."""
    from newsmotion_engine.video.compare import psnr_db, ssim_luma
    from newsmotion_engine.videoio import iter_frames

    psnr, ssim = [], []
    for a, b in zip(iter_frames(reference), iter_frames(other)):
        psnr.append(psnr_db(a, b))  # the A/B record's measures: RGB PSNR (capped), luma SSIM
        ssim.append(ssim_luma(a, b))
    if not psnr:
        raise NewsmotionError(f"{other}: no frames to compare")
    return {"frames": len(psnr), "psnr_db": round(float(np.mean(psnr)), 2), "psnr_db_min": round(min(psnr), 2),
            "ssim": round(float(np.mean(ssim)), 4), "ssim_min": round(min(ssim), 4)}  # fmt: skip
