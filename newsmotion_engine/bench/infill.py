"""Benchmark: quality and speed of the sparse-keyframe flow infill (:mod:`newsmotion_engine.video.infill`),
measured without any model weights.

Full-rate clips of real motion are rendered, every 2nd frame (1:2) or every 2nd and 3rd frame (1:3)
is dropped, the :class:`~newsmotion_engine.video.infill.Infiller` (the stage a render loop uses)
fills them back in from the keyframes, and each infilled frame is compared with the dropped true
frame: PSNR (RGB) and SSIM (luma; Gaussian window sigma 1.5, Wang et al. 2004) over the full frame
and over the face region. Targets (issue 10): >= 35 dB full frame, >= 30 dB face.

Clips (all 720x1280 by default, seamless loops, so the loop's tail is infilled towards frame 0):

- ``warp/<loop>``: the ``warp`` backend's raw frames (no encoding) of the sample persona
  (scikit-image's astronaut) performing each canonical loop (120 frames at 30 fps). Matte: keyed
  from the render (pixel != background colour; the warp backend composites over the exact
  colour). Face region: the box of the retargeted face keypoints, grown by 25 % per side (hair,
  forehead), per true frame. ``peak_px_per_frame`` here is the largest step of any confident
  retargeted keypoint (fingers included); the rendered pixels move less (the warp backend does
  not yet follow the arms fully).
- ``cutout/moderate`` and ``cutout/fast``: the persona's portrait cut out with its own matte over
  chroma green, moved by a known periodic similarity transform (side-to-side slide, a small
  rotation, a breathing zoom; sinusoidal in time, so it accelerates like real motion). Matte and
  face mask: the persona's, moved by the same transform. Peak speed is reported per clip.
- ``photo/moderate``: the whole portrait (its own backdrop included, no matte) sliding and zooming
  on a grey canvas, like the synthetic driving video of the extraction tests.

Speed: ``flow_ms`` (both DIS flows of one keyframe pair), ``warp_ms`` (one in-between frame from a
pair), and ``ms_per_infilled_frame`` for 1:2 and 1:3 (flow amortized over the pair's in-betweens),
at the bench size on this machine's CPU (median of a few pairs after the quality runs).

Run: ``python -m newsmotion_engine.bench.infill --json benchmarks/results/infill.json`` (a result record).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from newsmotion_engine.bench.common import machine_info
from newsmotion_engine.video.compare import psnr_db, ssim_map
from newsmotion_engine.video.infill import InfillConfig, Infiller, KeyframePair
from newsmotion_engine.video.infill_schedule import keyframe_schedule

__all__ = ["bench_infill", "TARGET_PSNR_DB", "TARGET_FACE_PSNR_DB"]

TARGET_PSNR_DB = 35.0
TARGET_FACE_PSNR_DB = 30.0

Log = Callable[[str], None]


# --------------------------------------------------------------------------------------------
# Clips: frames, mattes, face regions
# --------------------------------------------------------------------------------------------
@dataclass
class Clip:
    """A full-rate clip for the bench: ``frames()`` yields ``(rgb, matte or None, face mask)``."""

    name: str
    kind: str  # "warp" or "synthetic"
    description: str
    frames_count: int
    frames: Callable[[], Iterator[tuple[np.ndarray, np.ndarray | None, np.ndarray]]]
    matte: str  # how the matte is made ("none", "keyed", "exact")
    peak_px_per_frame: float
    loop: bool = True  # seamless (the tail is infilled towards frame 0); False for a window
    window: tuple[int, int] | None = None  # [start, end) of the full clip, when cut


def _window(speed: np.ndarray, frames: int | None) -> tuple[int, int] | None:
    """The ``frames``-long window centred on the fastest motion (``speed[t]``: pixels moved from
    frame t to t + 1), or ``None`` for the whole clip."""
    total = len(speed)
    if frames is None or frames >= total:
        return None
    start = int(np.clip(int(np.argmax(speed)) - frames // 2, 0, total - frames))
    return (start, start + frames)


def _sample_persona(store: Any, log: Log) -> Any:
    """The sample persona (astronaut), built (or reused) in ``store``."""
    from newsmotion_engine.bench.suites import sample_portrait
    from newsmotion_engine.persona.build import ensure_persona

    log("building the sample persona (astronaut)")
    persona, _ = ensure_persona(store, "astronaut", image=sample_portrait(store.persona_samples))
    return persona


@dataclass
class _Loop:
    loop_id: str
    keypoints: np.ndarray
    fps: int = 30

    @property
    def frames(self) -> int:
        return int(self.keypoints.shape[0])


def _warp_clip(loop_id: str, persona: Any, width: int, height: int, frames: int | None, background: tuple[int, int, int]) -> Clip:
    from newsmotion_engine.guidance.choreography import author_loop
    from newsmotion_engine.render.base import RenderSpec, get_backend
    from newsmotion_engine.render.clip import DEFAULT_LOOP_CANVAS
    from newsmotion_engine.render.retarget import retarget
    from newsmotion_engine.render.placement import place_portrait
    from newsmotion_engine.skeleton import FACE_START

    kp = author_loop(loop_id)
    portrait_hw = np.asarray(persona.portrait).shape[:2]
    kp_r = retarget(kp, persona.landmarks, loop_size=DEFAULT_LOOP_CANVAS, persona_size=(int(portrait_hw[1]), int(portrait_hw[0])))
    ox, oy, pw, ph = place_portrait(portrait_hw, width, height)
    px = kp_r[..., :2] * np.array([pw, ph]) + np.array([ox, oy])
    steps = np.linalg.norm(np.diff(np.concatenate([px, px[:1]]), axis=0), axis=-1)  # [T, 133], wrap included
    ok = kp_r[..., 2] >= 0.3
    window = _window(np.where(ok, steps, 0.0).max(axis=1), frames)
    if window is not None:
        sl = slice(*window)
        kp, kp_r, px, ok, steps = kp[sl], kp_r[sl], px[sl], ok[sl], steps[sl][:-1]
    peak = float(steps[ok[: len(steps)]].max()) if ok.any() else 0.0
    face = px[:, FACE_START : FACE_START + 68]
    face_ok = ok[:, FACE_START : FACE_START + 68]
    spec = RenderSpec(width, height, background=background)
    bg = np.array(background, np.uint8)

    def gen() -> Iterator[tuple[np.ndarray, np.ndarray | None, np.ndarray]]:
        backend = get_backend("warp")
        backend.load()
        try:
            for t, frame in enumerate(backend.frames(_Loop(loop_id, kp), persona, kp_r, spec)):
                matte = cv2.bitwise_not(cv2.inRange(frame, bg, bg))  # 255 wherever the colour is not exact
                yield frame, matte, _box_mask(face[t][face_ok[t]], width, height)
        finally:
            backend.close()

    desc = f"warp backend, {getattr(persona, 'persona_id', 'persona')} performing {loop_id}"
    return Clip(f"warp/{loop_id}", "warp", desc, int(kp.shape[0]), gen, "keyed", round(peak, 2),
                loop=window is None, window=window)  # fmt: skip


def _box_mask(points: np.ndarray, width: int, height: int, grow: float = 0.25) -> np.ndarray:
    mask = np.zeros((height, width), bool)
    if len(points) < 2:
        return mask
    x0, y0 = points.min(axis=0)
    x1, y1 = points.max(axis=0)
    gx, gy = grow * (x1 - x0), grow * (y1 - y0)
    xa, ya = int(np.clip(np.floor(x0 - gx), 0, width)), int(np.clip(np.floor(y0 - gy), 0, height))
    xb, yb = int(np.clip(np.ceil(x1 + gx), 0, width)), int(np.clip(np.ceil(y1 + gy), 0, height))
    mask[ya:yb, xa:xb] = True
    return mask


def _similarity(t: int, frames: int, width: int, amplitude: float, angle_deg: float, zoom: float) -> tuple[float, float, float, float]:
    """The clip's motion at frame t: (dx, dy, angle, scale), periodic in ``frames``."""
    ph = 2 * np.pi * t / frames
    return (amplitude * width * np.sin(ph), 0.25 * amplitude * width * np.sin(2 * ph),
            angle_deg * np.sin(ph + 0.7), 1.0 + zoom * np.sin(ph))  # fmt: skip


def _unpadded_box(image: np.ndarray) -> tuple[int, int, int, int]:
    """``(x0, y0, x1, y1)`` of ``image`` without the edge-replicated padding the persona
    normalizer adds around a photo that does not fill the canvas."""
    h, w = image.shape[:2]
    rows = np.flatnonzero((image[1:] != image[:-1]).reshape(h - 1, -1).any(axis=1))
    cols = np.flatnonzero((image[:, 1:] != image[:, :-1]).transpose(1, 0, 2).reshape(w - 1, -1).any(axis=1))
    if len(rows) == 0 or len(cols) == 0:
        return (0, 0, w, h)
    return (int(cols[0]), int(rows[0]), int(cols[-1]) + 2, int(rows[-1]) + 2)


def _affine_clip(persona: Any, name: str, frames: int, width: int, height: int, *, amplitude: float, angle_deg: float,
                 zoom: float, cutout: bool, background: tuple[int, int, int], window: int | None = None) -> Clip:  # fmt: skip
    """A clip of the persona's portrait moved by a known periodic similarity transform.

    ``cutout``: the person cut out with its matte over ``background``, the portrait scaled to the
    frame's width and placed low enough that the portrait's cut-off bottom edge never enters the
    frame. Otherwise: the photo itself (the normalizer's edge padding cropped away) at 80 % of
    the frame on a grey canvas, like a driving video."""
    portrait = np.asarray(persona.portrait)
    pmask = np.asarray(persona.person_mask)
    fmask = np.asarray(persona.face_mask)
    if not cutout:
        x0, y0, x1, y1 = _unpadded_box(portrait)
        portrait, fmask = portrait[y0:y1, x0:x1], fmask[y0:y1, x0:x1]
    ph_, pw_ = portrait.shape[:2]
    if cutout:
        k = min(width / pw_, height / ph_)
        # Bottom edge below the frame by more than the motion can lift it (slide, zoom about
        # ``centre``, rotation at half the width).
        lift = 0.25 * amplitude * width + zoom * 0.4 * height + np.sin(np.radians(angle_deg)) * width / 2 + 8
        cx, cy = width / 2.0, height - k * ph_ / 2 + lift
    else:
        k = 0.8 * min(width / pw_, height / ph_)
        cx, cy = width / 2.0, height / 2.0
    base = np.array([[k, 0, cx - k * pw_ / 2], [0, k, cy - k * ph_ / 2]], np.float64)
    centre = (width / 2.0, height * 0.6)
    canvas_colour = background if cutout else (128, 128, 128)

    def matrix(t: int) -> np.ndarray:
        dx, dy, ang, s = _similarity(t, frames, width, amplitude, angle_deg, zoom)
        rot = cv2.getRotationMatrix2D(centre, ang, s)
        m = np.vstack([rot, [0, 0, 1]]) @ np.vstack([base, [0, 0, 1]])
        m[0, 2] += dx
        m[1, 2] += dy
        return m[:2]

    # Peak speed: the fastest pixel of the person (or photo) between consecutive frames.
    pts = cv2.findNonZero((pmask > 127).astype(np.uint8)) if cutout else None
    if pts is None:
        pts = np.array([[[0, 0]], [[pw_, 0]], [[0, ph_]], [[pw_, ph_]]])
    pts = pts.reshape(-1, 2)[:: max(1, len(pts) // 2000)].astype(np.float64)
    hom = np.concatenate([pts, np.ones((len(pts), 1))], axis=1).T
    pos = np.stack([matrix(t) @ hom for t in range(frames + 1)])
    speed = np.linalg.norm(np.diff(pos, axis=0), axis=1).max(axis=-1)  # [frames]
    span = _window(speed, window)
    first, last = span or (0, frames)
    peak = float(speed[first : max(first + 1, last - 1)].max())

    def gen() -> Iterator[tuple[np.ndarray, np.ndarray | None, np.ndarray]]:
        bg = np.array(canvas_colour, np.float32)
        for t in range(first, last):
            m = matrix(t)
            img = cv2.warpAffine(portrait, m, (width, height), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_CONSTANT,
                                 borderValue=canvas_colour)  # fmt: skip
            face = cv2.warpAffine(fmask, m, (width, height), flags=cv2.INTER_LINEAR) > 127
            if not cutout:
                yield img, None, face
                continue
            alpha = cv2.warpAffine(pmask, m, (width, height), flags=cv2.INTER_LINEAR)
            a = alpha.astype(np.float32)[..., None] * (1.0 / 255.0)
            comp = img.astype(np.float32) * a + bg * (1.0 - a)
            yield np.clip(comp + 0.5, 0, 255).astype(np.uint8), alpha, face

    what = "portrait cut out with its matte over chroma green" if cutout else "the photo (no matte) on a grey canvas"
    desc = (f"{what}, periodic similarity motion over {frames} frames: slide +-{amplitude * width:.0f} px, "
            f"rotate +-{angle_deg:g} deg, zoom +-{zoom * 100:g} %; ground-truth face mask moved along")  # fmt: skip
    return Clip(name, "synthetic", desc, last - first, gen, "exact" if cutout else "none", round(peak, 2),
                loop=span is None, window=span)  # fmt: skip


# --------------------------------------------------------------------------------------------
# The measurement
# --------------------------------------------------------------------------------------------
def _measure_clip(clip: Clip, ratio: int, config: InfillConfig, background: tuple[int, int, int]) -> dict[str, Any]:
    """Stream ``clip`` through the :class:`Infiller` as a render loop would (keyframes only), and
    compare each infilled frame with the dropped true frame as it comes out (only the frames not
    yet emitted are held)."""
    schedule = keyframe_schedule(clip.frames_count, ratio, loop=clip.loop)
    keyset = set(schedule.keyframes)
    infilled = set(schedule.infilled)
    infill = Infiller(ratio, clip.frames_count, loop=clip.loop, background=background, config=config)
    pending: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # truth (rgb, face) not yet compared
    keys: dict[int, np.ndarray] = {}  # keyframes the hold baseline may need (first, last three)
    rows: list[dict[str, Any]] = []
    emitted = 0

    def take(outs: list[np.ndarray]) -> None:
        nonlocal emitted
        for out in outs:
            i = emitted
            emitted += 1
            if i not in infilled:
                pending.pop(i, None)
                continue
            rgb, face = pending.pop(i)
            k0, k1, t = schedule.source(i)
            hold = keys[k0] if t <= 0.5 else keys[k1 % clip.frames_count]
            smap = ssim_map(out, rgb)
            has_face = bool(face.any())
            rows.append({
                "frame": i,
                "psnr": psnr_db(out, rgb),
                "ssim": float(smap.mean()),
                "face_psnr": psnr_db(out, rgb, face) if has_face else None,
                "face_ssim": float(smap[face].mean()) if has_face else None,
                "hold_psnr": psnr_db(hold, rgb),
            })  # fmt: skip

    for i, (rgb, matte, face) in enumerate(clip.frames()):
        if i not in keyset:
            pending[i] = (rgb, face)
            continue
        keys[i] = rgb
        for old in sorted(k for k in keys if k != 0)[:-3]:  # output runs one keyframe behind
            del keys[old]
        take(infill.push(rgb, matte if clip.matte != "none" else None))
    take(infill.flush())
    if emitted != clip.frames_count or pending:
        raise RuntimeError(f"{clip.name}: the infiller emitted {emitted} frames for {clip.frames_count}")
    st = infill.stats
    return {
        "frames_infilled": len(rows),
        **_summary(rows),
        "flow_ms_per_pair": round(st["flow_ms"] / max(1, st["pairs"]), 1),
        "warp_ms_per_frame": round(st["warp_ms"] / max(1, st["infilled"]), 1),
        "_rows": rows,
    }


def _summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    def mean(key: str) -> float | None:
        vals = [r[key] for r in rows if r[key] is not None]
        return round(float(np.mean(vals)), 3) if vals else None

    def worst(key: str) -> dict[str, Any] | None:
        vals = [r for r in rows if r[key] is not None]
        if not vals:
            return None
        r = min(vals, key=lambda r: r[key])
        return {"frame": r["frame"], key: round(r[key], 3), **({"clip": r["clip"]} if "clip" in r else {})}

    return {
        "psnr_db": mean("psnr"),
        "ssim": mean("ssim"),
        "face_psnr_db": mean("face_psnr"),
        "face_ssim": mean("face_ssim"),
        "worst_frame": worst("psnr"),
        "worst_face_frame": worst("face_psnr"),
        "hold_psnr_db": mean("hold_psnr"),
    }


def _timing(clip: Clip, config: InfillConfig, pairs: int, torch_cpu: bool) -> dict[str, Any]:
    """Median per-pair flow time and per-frame warp time (``t = 1/2``, with both neighbouring
    pairs, as the streaming stage runs it) over ``pairs`` consecutive 1:2 keyframe pairs of
    ``clip``; optionally the torch path on the CPU for one frame."""
    frames = []
    for i, item in enumerate(clip.frames()):
        frames.append(item)
        if i >= 2 * (pairs + 2):
            break
    flow, warp = [], []
    chain: list[KeyframePair] = []
    for j in range(pairs + 2):
        (a, ma, _), (b, mb, _) = frames[2 * j], frames[2 * j + 2]
        t0 = time.perf_counter()
        chain.append(KeyframePair(a, b, alpha_a=ma, alpha_b=mb, config=config, gap=2))
        flow.append((time.perf_counter() - t0) * 1e3)
    for j in range(1, pairs + 1):
        t0 = time.perf_counter()
        chain[j].at(0.5, before=chain[j - 1], after=chain[j + 1])
        warp.append((time.perf_counter() - t0) * 1e3)
    f, w = statistics.median(flow), statistics.median(warp)
    out: dict[str, Any] = {
        "pairs_timed": pairs,
        "matte": clip.matte != "none",
        "flow_ms": round(f, 1),
        "warp_ms": round(w, 1),
        "ms_per_infilled_frame": {"1:2": round(f + w, 1), "1:3": round(f / 2 + w, 1)},
    }
    if torch_cpu:
        from newsmotion_engine.video.infill_torch import at_torch

        at_torch(chain[1], 0.5, before=chain[0], after=chain[2], device="cpu")  # upload + first-call costs
        t0 = time.perf_counter()
        at_torch(chain[1], 0.5, before=chain[0], after=chain[2], device="cpu")
        out["torch_cpu_warp_ms"] = round((time.perf_counter() - t0) * 1e3, 1)
    return out


@contextlib.contextmanager
def _storage(storage: Any) -> Iterator[Any]:
    from newsmotion_engine.bench.suites import private_storage
    from newsmotion_engine.storage import Storage

    if storage is None:
        with private_storage() as store:
            yield store
    else:
        yield storage if isinstance(storage, Storage) else Storage(Path(storage))


def bench_infill(
    storage: Any = None,
    *,
    persona: Any = None,
    ratios: tuple[int, ...] = (2, 3),
    loops: tuple[str, ...] | None = None,
    frames: int | None = None,
    synthetic: bool = True,
    width: int = 720,
    height: int = 1280,
    config: InfillConfig | None = None,
    timing_pairs: int = 3,
    torch_cpu: bool = True,
    threads: int | None = 2,
    log: Log | None = None,
) -> dict[str, Any]:
    """Measure the flow infill on dropped frames of real-motion clips (see the module docstring).

    Args:
        storage: the ``Storage`` (or its root folder) that holds the sample persona's cache;
            ``None`` (default): a private temporary one, removed afterwards.
        persona: a loaded persona to use instead of building the sample one (tests pass a tiny
            drawn figure).
        ratios: keyframe ratios to measure (2 = 1:2, 3 = 1:3).
        loops: canonical loops rendered with the warp backend (default: all seven).
        frames: measure each clip on a window of this many frames centred on its fastest motion
            (default: the whole loop; a window is infilled as a clip that does not loop: its last
            frame is a keyframe). Keeps the run short on a small machine.
        synthetic: also measure the synthetic large-motion clips.
        width, height: frame size (default 720x1280).
        config: the infill settings (default :class:`InfillConfig()`).
        timing_pairs: keyframe pairs timed for the speed figures.
        torch_cpu: also time the torch warp path on the CPU (one frame; the GPU figure is
            measured on the GPU machine).
        threads: OpenCV threads (process-wide; ``None`` leaves OpenCV's choice).
        log: progress lines.

    Returns:
        ``{"benchmark": "infill", "infill_psnr_db": ..., "infill_face_psnr_db": ...,
        "infill_ms_per_frame_cpu": ..., "overall": {"1:2": {...}, "1:3": {...}}, "by_kind": {...},
        "clips": [{name, kind, description, matte, peak_px_per_frame, "1:2": {psnr_db, ssim,
        face_psnr_db, face_ssim, worst_frame, hold_psnr_db, ...}}], "speed": {...}, "targets": ...}``.
        ``hold_psnr_db`` is the baseline of repeating the nearer keyframe.
    """
    from newsmotion_engine.guidance.catalogue import LOOP_IDS
    from newsmotion_engine.render.base import BACKGROUND_CHROMA_GREEN

    say = log or (lambda _m: None)
    cfg = config or InfillConfig()
    if threads:
        cv2.setNumThreads(int(threads))
    background = BACKGROUND_CHROMA_GREEN
    loops = LOOP_IDS if loops is None else tuple(loops)
    started = time.perf_counter()
    with _storage(storage) as store:
        if persona is None:
            persona = _sample_persona(store, say)
        clips = [_warp_clip(loop_id, persona, width, height, frames, background) for loop_id in loops]
        if synthetic:
            clips += [
                _affine_clip(persona, "cutout/moderate", 120, width, height, amplitude=0.12, angle_deg=4, zoom=0.08,
                             cutout=True, background=background, window=frames),
                _affine_clip(persona, "cutout/fast", 60, width, height, amplitude=0.2, angle_deg=8, zoom=0.1,
                             cutout=True, background=background, window=frames),
                _affine_clip(persona, "photo/moderate", 120, width, height, amplitude=0.12, angle_deg=4, zoom=0.08,
                             cutout=False, background=background, window=frames),
            ]  # fmt: skip
        results = []
        all_rows: dict[str, dict[str, list]] = {}
        for clip in clips:
            entry: dict[str, Any] = {
                "name": clip.name,
                "kind": clip.kind,
                "description": clip.description,
                "frames": clip.frames_count,
                "window": list(clip.window) if clip.window else "whole loop",
                "matte": clip.matte,
                "peak_px_per_frame": clip.peak_px_per_frame,
            }
            for r in ratios:
                key = f"1:{r}"
                t0 = time.perf_counter()
                m = _measure_clip(clip, r, cfg, background)
                rows = m.pop("_rows")
                for row in rows:
                    row["clip"] = clip.name
                all_rows.setdefault(key, {}).setdefault(clip.kind, []).extend(rows)
                entry[key] = m
                say(f"{clip.name} {key}: {m['psnr_db']} dB (face {m['face_psnr_db']} dB, worst {m['worst_frame']['psnr']} dB, "
                    f"hold {m['hold_psnr_db']} dB) in {time.perf_counter() - t0:.1f} s")  # fmt: skip
            results.append(entry)
        speed_clip = next((c for c in clips if c.matte == "exact"), clips[0])
        say(f"timing {timing_pairs} keyframe pairs of {speed_clip.name}")
        speed = {"clip": speed_clip.name, "width": width, "height": height, "threads": threads,
                 "load_average_1m": round(os.getloadavg()[0], 2), **_timing(speed_clip, cfg, timing_pairs, torch_cpu)}  # fmt: skip

    overall: dict[str, Any] = {}
    by_kind: dict[str, Any] = {}
    for key, kinds in all_rows.items():
        rows = [r for rs in kinds.values() for r in rs]
        overall[key] = {"frames_infilled": len(rows), **_summary(rows)}
        by_kind[key] = {kind: {"frames_infilled": len(rs), **_summary(rs)} for kind, rs in kinds.items()}
    targets = {
        key: {
            kind: {"psnr": (s["psnr_db"] or 0) >= TARGET_PSNR_DB, "face_psnr": (s["face_psnr_db"] or 0) >= TARGET_FACE_PSNR_DB}
            for kind, s in kinds.items()
        }
        for key, kinds in by_kind.items()
    }
    headline = overall.get("1:2") or next(iter(overall.values()), {})
    return {
        "benchmark": "infill",
        # The headline figures: 1:2, mean over every infilled frame of every clip.
        "infill_psnr_db": headline.get("psnr_db"),
        "infill_face_psnr_db": headline.get("face_psnr_db"),
        "infill_ms_per_frame_cpu": speed["ms_per_infilled_frame"]["1:2"],
        "target_psnr_db": TARGET_PSNR_DB,
        "target_face_psnr_db": TARGET_FACE_PSNR_DB,
        "meets_target": targets,
        "overall": overall,
        "by_kind": by_kind,
        "clips": results,
        "speed": speed,
        "config": cfg.as_dict(),
        "settings": {"ratios": list(ratios), "loops": list(loops), "frames_per_warp_loop": frames or "whole loop",
                     "synthetic": synthetic, "width": width, "height": height,
                     "persona": getattr(persona, "persona_id", None),
                     "metrics": "PSNR on RGB; SSIM on luma (Gaussian sigma 1.5); face: region mean; means over frames"},  # fmt: skip
        "wall_s": round(time.perf_counter() - started, 1),
        "machine": {**machine_info(), "opencv": cv2.__version__},
    }


def headline(result: dict[str, Any]) -> dict[str, float]:
    """The figures people read from :func:`bench_infill`'s result: PSNR of the infilled frames per
    keyframe ratio, and the CPU time per infilled frame."""
    figures: dict[str, float] = {}
    for ratio, row in result["overall"].items():
        figures[f"PSNR at {ratio} (dB)"] = round(row["psnr_db"], 1)
        figures[f"face PSNR at {ratio} (dB)"] = round(row["face_psnr_db"], 1)
    figures["CPU per infilled frame (ms)"] = result["infill_ms_per_frame_cpu"]
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Flow-infill quality (PSNR/SSIM of dropped frames) and speed.")
    parser.add_argument("--json", type=Path, help="write the result record here (atomically)")
    parser.add_argument("--frames", type=int, default=None,
                        help="measure each clip on a window of this many frames around its fastest motion")
    parser.add_argument("--loops", default=None, help="comma-separated loop ids (default: all seven)")
    parser.add_argument("--ratios", default="2,3", help="keyframe ratios, e.g. 2,3")
    parser.add_argument("--no-synthetic", action="store_true", help="only the warp renders")
    parser.add_argument("--size", default="720x1280", help="WIDTHxHEIGHT")
    args = parser.parse_args(argv)
    width, height = (int(v) for v in args.size.lower().split("x"))
    result = bench_infill(
        ratios=tuple(int(r) for r in args.ratios.split(",")),
        loops=tuple(args.loops.split(",")) if args.loops else None,
        frames=args.frames,
        synthetic=not args.no_synthetic,
        width=width,
        height=height,
        log=lambda m: print(m, file=sys.stderr, flush=True),
    )
    if args.json:
        from newsmotion_engine.bench.record import write_result
        from newsmotion_engine.bench.suites import bench_record

        write_result(args.json, bench_record("infill", result))
    else:
        sys.stdout.write(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
