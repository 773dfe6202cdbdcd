"""Benchmark: does the green screen (:mod:`newsmotion_engine.render.chroma`) key a generated frame
as cleanly as the warp backend's?

No real diffusion weights are here (random weights paint noise), so the frames are made
*generated-like*: the warp backend's render of each sample persona performing a canonical loop
over the exact key colour, whose background is then replaced by what a diffusion model paints
behind a person conditioned on a green reference: the key colour with a vertical shading gradient
(+-18 levels), a soft shadow beside the person (-25), per-pixel noise (sigma 5) over everything
(sigma 3 on the person), and the warp's own anti-aliased edge, which blends into the key, left as
green fringe. The person pixels of the warp render are the ground truth.

Per frame, with :func:`~newsmotion_engine.bench.matte.matte_figures` (the matte bench's
definitions) on the frame's landmarks:

- ``before``: the raw frame keyed on the exact colour, as :func:`~newsmotion_engine.render.keyframes.keyed_matte`
  and any downstream chroma keyer would (every pixel not exactly the key is person);
- ``after``: the frame through :func:`~newsmotion_engine.render.chroma.chroma_composite`;

plus against the ground truth: ``exact_background`` (share of true background pixels that are
exactly the key colour), ``iou`` (solid matte vs the true person), ``person_error`` (mean absolute
difference on the true person's interior, 0..255).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import cv2
import numpy as np

__all__ = ["bench_chroma", "generated_like"]


def generated_like(frame: np.ndarray, key: tuple[int, int, int], seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(``frame`` with a diffusion-like background, true person mask bool) — see the module docstring."""
    rng = np.random.default_rng(seed)
    h, w = frame.shape[:2]
    person = np.any(frame != np.asarray(key, np.uint8), axis=-1)
    y = np.linspace(-1.0, 1.0, h, dtype=np.float32)[:, None, None]
    bg = np.asarray(key, np.float32) + 18.0 * y * np.array([0.6, 1.0, 0.8], np.float32)
    shadow = cv2.GaussianBlur(cv2.dilate(person.astype(np.float32), np.ones((9, 9), np.uint8)), (0, 0), w / 25)
    shadow = np.roll(shadow, w // 20, axis=1)[..., None]
    bg = bg - 25.0 * shadow
    out = np.where(person[..., None], frame.astype(np.float32) + rng.normal(0, 3, frame.shape), bg + rng.normal(0, 5, frame.shape))
    return np.clip(np.rint(out), 0, 255).astype(np.uint8), person


def _truth_figures(alpha: np.ndarray, out: np.ndarray, truth_rgb: np.ndarray, person: np.ndarray, key: tuple[int, int, int]) -> dict[str, Any]:
    solid = alpha >= 128
    interior = cv2.erode(person.astype(np.uint8), np.ones((5, 5), np.uint8)).astype(bool)
    exact = np.all(out == np.asarray(key, np.uint8), axis=-1)
    return {
        "exact_background": round(float(exact[~person].mean()), 5),
        "iou": round(float((solid & person).sum()) / max(float((solid | person).sum()), 1.0), 5),
        "person_error": round(float(np.abs(out[interior].astype(np.float32) - truth_rgb[interior].astype(np.float32)).mean()), 3),
    }


def bench_chroma(storage: Any, *, portraits: list[str] | None = None, loop_id: str = "welcome", size: tuple[int, int] = (360, 640),
                 frames: tuple[int, ...] = (0, 60), log: Callable[[str], None] | None = None) -> dict[str, Any]:  # fmt: skip
    """Build each sample persona and the loop in ``storage``, render the listed frames with the warp
    backend, make them generated-like and measure before/after (see the module docstring)."""
    from newsmotion_engine.bench.common import machine_info
    from newsmotion_engine.bench.matte import matte_figures
    from newsmotion_engine.guidance.cache import ensure_guidance
    from newsmotion_engine.persona.build import ensure_persona
    from newsmotion_engine.render.base import RenderSpec, get_backend
    from newsmotion_engine.render.chroma import chroma_composite
    from newsmotion_engine.render.clip import retargeted_keypoints
    from newsmotion_engine.render.keyframes import keyed_matte
    from newsmotion_engine.samples import SAMPLE_PORTRAITS, write_sample_portrait

    say = log or (lambda _m: None)
    spec = RenderSpec(width=size[0], height=size[1])
    key = spec.background
    loop, _ = ensure_guidance(storage, loop_id)
    results: dict[str, Any] = {}
    for name in portraits or list(SAMPLE_PORTRAITS):
        persona, _ = ensure_persona(storage, name, image=write_sample_portrait(name, storage.persona_samples))
        kp = retargeted_keypoints(loop, persona)
        warp = get_backend("warp")
        rendered = list(warp.frames(loop, persona, kp[list(frames)], spec))
        warp.close()
        rows = {}
        for i, (index, frame) in enumerate(zip(frames, rendered)):
            raw, person = generated_like(frame, key, seed=i)
            matted = chroma_composite(raw, key)
            before_alpha = keyed_matte(raw, key)
            rows[str(index)] = {
                "before": {**matte_figures(before_alpha, raw, raw, kp[index]), **_truth_figures(before_alpha, raw, frame, person, key)},
                "after": {**matte_figures(matted.alpha, matted.rgb, raw, kp[index]),
                          **_truth_figures(matted.alpha, matted.rgb, frame, person, key)},  # fmt: skip
                "estimated_background": [round(v, 1) for v in matted.background],
                "estimated_noise": round(matted.noise, 2),
            }
            a = rows[str(index)]
            say(f"{name} frame {index}: exact background {a['before']['exact_background']:.3f} -> {a['after']['exact_background']:.3f}, "
                f"iou {a['before']['iou']:.3f} -> {a['after']['iou']:.3f}, outside {a['before']['outside_fraction']:.3f} -> "
                f"{a['after']['outside_fraction']:.3f}, halo {a['before']['halo_width_px']:.2f} -> {a['after']['halo_width_px']:.2f} px")  # fmt: skip
        results[name] = rows
    return {
        "benchmark": "chroma",
        "definitions": {
            "frames": "warp render of the sample persona performing the loop over the key, background replaced by a "
                      "diffusion-like one (gradient +-18, shadow -25, noise sigma 5; person noise sigma 3; green edge fringe kept)",
            "before": "raw frame keyed on the exact key colour (keyframes.keyed_matte)",
            "after": "render/chroma.py chroma_composite (the diffusion backends' default chroma='matte')",
            "matte_figures": "bench/matte.py matte_figures on the frame's retargeted landmarks",
            "exact_background": "share of true background pixels exactly the key colour",
            "iou": "solid matte (alpha>=0.5) vs the true person",
            "person_error": "mean |output - warp render| on the true person's interior (eroded 2 px), 0..255",
        },
        "loop": loop_id,
        "size": list(size),
        "key": list(key),
        "portraits": results,
        "machine": machine_info(),
    }


def headline(result: dict[str, Any]) -> dict[str, float]:
    """The figures people read from :func:`bench_chroma`'s result: over every portrait and frame,
    the worst share of background exactly the key (ours; the raw frame keyed at its best) and
    the worst matte IoU."""
    frames = [f for by_frame in result["portraits"].values() for f in by_frame.values()]

    def spread(stage: str, key: str) -> list[float]:
        return [f[stage][key] for f in frames]

    return {"background exactly the key, worst frame (%)": round(100 * min(spread("after", "exact_background")), 1),
            "the raw frame keyed, best frame (%)": round(100 * max(spread("before", "exact_background")), 1),
            "matte IoU, worst frame": round(min(spread("after", "iou")), 3)}


def main(argv: list[str] | None = None) -> int:
    """``python -m newsmotion_engine.bench.chroma --json benchmarks/results/chroma.json``: the three sample
    personas, frames 0 and 60 of ``welcome`` at 360x640, built in a temporary storage."""
    import argparse
    import tempfile
    from pathlib import Path

    from newsmotion_engine.bench.record import read_result, write_result
    from newsmotion_engine.bench.suites import bench_record
    from newsmotion_engine.storage import Storage

    parser = argparse.ArgumentParser(prog="python -m newsmotion_engine.bench.chroma", description=main.__doc__)
    parser.add_argument("--json", type=Path, help="write the result record here")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="newsmotion-chroma-") as tmp:
        result = bench_chroma(Storage(Path(tmp)), log=print)
    if args.json:
        old = read_result(args.json).data if args.json.is_file() else {}
        if "note" in old:  # the hand-written caveat travels with the figures it explains
            result["note"] = old["note"]
        write_result(args.json, bench_record("chroma", result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
