"""TeaCache calibration: fit the rescale polynomial from a recorded full run.

TeaCache decides to skip a transformer call from the relative change of the modulated timestep
embedding, mapped through a polynomial onto the expected relative change of the model output.
That mapping depends on the weights, so the identity default is only a placeholder: this records a
full render (every step computed, pairs of (embedding change, output change) kept by the hook)
and fits the polynomial with least squares (TeaCache, Liu et al. 2024, arXiv:2411.19108).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from newsmotion_engine.errors import NewsmotionError
from newsmotion_engine.render.base import RenderSpec
from newsmotion_engine.storage import Storage


def calibrate_teacache(
    storage: Storage,
    persona_id: str,
    loop_id: str,
    options: dict[str, Any],
    spec: RenderSpec,
    *,
    degree: int = 4,
    on_step: Callable[[str], Callable[[int, int], None]] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """Render ``loop_id`` on ``persona_id`` with every step computed while recording, then fit.

    Like ``newsmotion render``, caches that are missing or stale are built first (as visible steps
    through ``on_step``, see :func:`~newsmotion_engine.render.job.ensure_render_inputs`), the
    backend's sub-caches included.

    ``options`` is the flat wan-animate options mapping (CLI ``-o``); the run uses them with
    ``TeaCache(threshold=0, record=True)`` in place of any TeaCache setting. Returns
    ``{"coefficients", "degree", "pairs", "fit_rel_rmse", "weights", "options", ...}``; use the
    coefficients as the backend option ``teacache_coefficients`` with ``teacache > 0``.
    """
    from newsmotion_engine.accel.teacache import TeaCache, fit_rescale, recorded_pairs
    from newsmotion_engine.render import wan_animate
    from newsmotion_engine.render.job import ensure_render_inputs, render_persona_loop
    from newsmotion_engine.render.wan_animate.config import WanAnimateOptions

    opts = WanAnimateOptions.from_mapping(options)
    given = opts.accel(TeaCache)
    if given is not None and given.threshold > 0:
        raise NewsmotionError("calibration records a full run: leave the teacache option out (or 0)")
    backend = wan_animate.create(opts.with_accelerations(TeaCache(threshold=0.0, record=True)))
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
