"""Benchmark: how clean the person matte is on the sample portraits, before and after cleaning.

For each sample portrait (:data:`newsmotion_engine.samples.SAMPLE_PORTRAITS`) the persona is built
as a user would (``ensure_persona``: framing, matte with cleaning). "after" is that cache's matte
and portrait; "before" is the same photo at the same placement matted with ``clean=False`` (the
matte the project had before issue 12: no fragment cut, no fine edge, no foreground colours).
Both are measured by the same functions:

- ``outside_fraction``: share of the matte's mass (sum of alpha) outside the *person region*
  (:func:`newsmotion_engine.persona.matte.person_region`: the convex hull of the confident body,
  face and hand landmarks, extended straight down from the shoulders, plus a point above the
  brows for the hair) widened by :data:`REGION_MARGIN` (0.25) x the shoulder width, half the
  margin the matte itself is clipped to. Background keyed in as person (a flag's stripes, a
  tripod) lands there.
- ``fragments``: solid pieces (alpha >= 0.5) holding no confident landmark, and their share of
  the matte (``fragment_fraction``).
- ``halo_width_px``: the old background showing around the person once composited: over the
  matte's edge (0.02 < alpha), the alpha of pixels whose stored colour is closer to the local
  background colour (box-filtered mean of the photo where the matte is empty) than to the local
  person colour (mean where it is solid), summed and divided by the silhouette's length (the
  alpha = 0.5 contour): the mean width, in canvas pixels, of a fully opaque band of background
  colour along the outline. ``soft_edge_px``: the semi-transparent band's mean width, same way.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import cv2
import numpy as np

from newsmotion_engine.persona.matte import person_region

__all__ = ["REGION_MARGIN", "matte_figures", "bench_matte"]

# The measured region is tighter than the one the matte is clipped to (matte.REGION_MARGIN, 0.5):
# what the bench counts as outside is not zero by construction.
REGION_MARGIN = 0.25
# Local colour means: box filter size as a fraction of the canvas's longer side.
COLOUR_WINDOW = 0.03
_CONF = 0.5


def _local_mean(rgb: np.ndarray, weight: np.ndarray, size: int) -> np.ndarray:
    w = weight.astype(np.float32)
    num = cv2.blur(rgb.astype(np.float32) * w[..., None], (size, size))
    den = cv2.blur(w, (size, size))[..., None]
    return num / np.maximum(den, 1e-6)


def matte_figures(alpha_u8: np.ndarray, shown_rgb: np.ndarray, photo_rgb: np.ndarray, landmarks: np.ndarray) -> dict[str, Any]:
    """The figures of one matte: ``alpha_u8`` [H, W], the colours a render shows (``shown_rgb``),
    the photo as placed before any matting (``photo_rgb``), canvas-normalized ``landmarks``."""
    h, w = alpha_u8.shape
    a = alpha_u8.astype(np.float32) / 255.0
    total = float(a.sum())
    region = person_region(landmarks, (h, w), REGION_MARGIN)
    outside = float(a[~region].sum()) / max(total, 1e-6)

    solid = (a >= 0.5).astype(np.uint8)
    count, labels, stats, _ = cv2.connectedComponentsWithStats(solid, connectivity=8)
    labelled = set()
    for x, y, c in np.asarray(landmarks, np.float64):
        if c >= _CONF and 0 <= x < 1 and 0 <= y < 1:
            labelled.add(int(labels[int(y * h), int(x * w)]))
    pieces = [i for i in range(1, count) if i not in labelled]
    fragment_area = float(sum(stats[i, cv2.CC_STAT_AREA] for i in pieces))

    contours, _ = cv2.findContours(solid, cv2.RETR_LIST, cv2.CHAIN_APPROX_NONE)
    length = float(sum(cv2.arcLength(c, True) for c in contours))
    size = max(3, round(COLOUR_WINDOW * max(h, w)) | 1)
    fg = _local_mean(photo_rgb, a >= 0.98, size)
    bg = _local_mean(photo_rgb, a <= 0.02, size)
    shown = shown_rgb.astype(np.float32)
    closer_to_bg = np.linalg.norm(shown - bg, axis=-1) < np.linalg.norm(shown - fg, axis=-1)
    edge = (a > 0.02) & (a < 0.98)
    halo = float((a * (closer_to_bg & (a > 0.02) & (a < 1.0))).sum())
    return {
        "outside_fraction": round(outside, 5),
        "fragments": len(pieces),
        "fragment_fraction": round(fragment_area / max(float(solid.sum()), 1.0), 5),
        "halo_width_px": round(halo / max(length, 1.0), 3),
        "soft_edge_px": round(float(edge.sum()) / max(length, 1.0), 3),
        "outline_px": round(length, 1),
        "coverage": round(total / (h * w), 5),
    }


FRAMINGS = ("medium", "as-is")


def bench_matte(
    storage: Any,
    *,
    portraits: list[str] | None = None,
    framings: tuple[str, ...] = FRAMINGS,
    log: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Build each sample persona in ``storage`` in each framing (the default medium shot crops
    most of a photo's background away; ``as-is`` keeps all of it, flags and shuttles included)
    and measure its matte before and after cleaning."""
    from newsmotion_engine.bench.common import machine_info
    from newsmotion_engine.persona import image as image_mod
    from newsmotion_engine.persona import matte as matte_mod
    from newsmotion_engine.persona.build import ensure_persona
    from newsmotion_engine.samples import SAMPLE_PORTRAITS, write_sample_portrait

    say = log or (lambda _m: None)
    results: dict[str, Any] = {}
    for name in portraits or list(SAMPLE_PORTRAITS):
        source = write_sample_portrait(name, storage.persona_samples)
        for framing in framings:
            say(f"{name} ({framing}): building the persona (framing, matte with cleaning)")
            started = time.perf_counter()
            persona, _ = ensure_persona(storage, name, image=source, force=True, framing=framing)
            build_s = time.perf_counter() - started
            meta = persona.metadata
            placement = image_mod.Placement(**meta["placement"])
            rgb = image_mod.read_portrait(source).rgb
            photo = image_mod.place_image(rgb, placement, fill="replicate")
            x0, y0, x1, y1 = image_mod.visible_window(placement)
            lm = np.asarray(persona.landmarks, np.float64)
            local = lm.copy()
            local[:, 0] = (lm[:, 0] * photo.shape[1] - x0) / max(x1 - x0, 1)
            local[:, 1] = (lm[:, 1] * photo.shape[0] - y0) / max(y1 - y0, 1)
            local[lm[:, 2] <= 0] = 0.0
            say(f"{name} ({framing}): the same photo matted without cleaning (before)")
            crop = np.ascontiguousarray(photo[y0:y1, x0:x1])
            raw = matte_mod.person_matte(crop, landmarks=local.astype(np.float32), clean=False)
            before_alpha = np.zeros(photo.shape[:2], np.uint8)
            before_alpha[y0:y1, x0:x1] = raw.alpha
            before_rgb = photo.copy()
            before_rgb[y0:y1, x0:x1] = raw.rgb
            before = matte_figures(before_alpha, before_rgb, photo, lm)
            after = matte_figures(np.asarray(persona.person_mask), np.asarray(persona.portrait), photo, lm)
            results.setdefault(name, {"kind": SAMPLE_PORTRAITS[name].kind, "origin": SAMPLE_PORTRAITS[name].origin})
            results[name][framing] = {
                "matte_method": persona.matte_method,
                "framing": meta.get("framing"),
                "build_s": round(build_s, 3),
                "before": before,
                "after": after,
            }
            say(f"{name} ({framing}): outside {before['outside_fraction']:.4f} -> {after['outside_fraction']:.4f}, "
                f"fragments {before['fragments']} -> {after['fragments']}, "
                f"halo {before['halo_width_px']:.2f} -> {after['halo_width_px']:.2f} px")  # fmt: skip
    return {
        "benchmark": "matte",
        "definitions": {
            "before": "same photo and placement, person_matte(clean=False): the matte before issue 12",
            "after": "the persona cache as built (person_matte(clean=True))",
            "region_margin": REGION_MARGIN,
            "colour_window": COLOUR_WINDOW,
        },
        "portraits": results,
        "machine": machine_info(),
    }


def headline(result: dict[str, Any]) -> dict[str, str]:
    """The figures people read from :func:`bench_matte`'s result: the edge halo of each portrait
    at medium framing, before and after cleaning."""
    figures: dict[str, str] = {}
    for name, by_framing in result["portraits"].items():
        row = by_framing.get("medium")
        if isinstance(row, dict) and "before" in row:
            figures[f"{name} halo before / after (px)"] = f"{row['before']['halo_width_px']:.2f} / {row['after']['halo_width_px']:.2f}"
    return figures
