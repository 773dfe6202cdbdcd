"""Sparse keyframes, the render-level stage every backend gets (``RenderSpec.keyframes``).

With ``spec.keyframes = N > 1`` a render asks its backend for every N-th frame only: the driving
pose (the retargeted keypoints) is sampled at the keyframe indices of
:func:`~newsmotion_engine.video.infill_schedule.keyframe_schedule` (loops are seamless, so the frames after
the last keyframe are infilled towards frame 0), the backend renders that shorter sequence as an
ordinary clip, and :class:`~newsmotion_engine.video.infill.Infiller` synthesizes the frames
between from bidirectional DIS optical flow with occlusion-aware blending. The backend never
knows: a diffusion backend simply denoises fewer latent frames (about half the tokens at 1:2,
so about a quarter of the attention work), the warp backend warps fewer frames.

Matte: the infill interpolates the person layer only and composites it over the exact
background colour, so the chroma background stays exact. The person matte of a keyframe is
"every pixel that is not exactly the background colour" (:func:`keyed_matte`): exact for the warp
backend, which composites over the exact colour; for a backend whose background is not exact
(a diffusion model) the matte is the whole frame and the infill is plain flow interpolation.

Example::

    schedule = clip_schedule(120, spec)                  # keyframes 0, 2, 4, ... (spec.keyframes=2)
    frames = backend.frames(loop, persona, driving_keypoints(retargeted, schedule), spec)
    for frame in infill_frames(frames, schedule, spec):  # 120 frames, in order
        encoder.write(frame)
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable, Iterator
from typing import Any

import cv2
import numpy as np

from newsmotion_engine.render.base import RenderSpec
from newsmotion_engine.video.infill import InfillConfig, Infiller
from newsmotion_engine.video.infill_schedule import KeyframeSchedule, keyframe_schedule

__all__ = ["InfillStats", "clip_schedule", "driving_keypoints", "driving_visemes", "infill_frames", "keyed_matte"]


def clip_schedule(frames: int, spec: RenderSpec) -> KeyframeSchedule:
    """The keyframe schedule of a ``frames``-long loop at ``spec.keyframes`` (a seamless loop)."""
    return keyframe_schedule(int(frames), spec.keyframes, loop=True)


def driving_keypoints(keypoints: np.ndarray, schedule: KeyframeSchedule) -> np.ndarray:
    """The keypoints of the keyframes only (``[len(keyframes), 133, 3]``), what the backend renders."""
    kp = np.asarray(keypoints)
    if kp.shape[0] != schedule.frames:
        raise ValueError(f"{kp.shape[0]} keypoint frames for a {schedule.frames}-frame keyframe schedule")
    if schedule.ratio == 1:
        return kp
    return np.ascontiguousarray(kp[list(schedule.keyframes)])


def driving_visemes(visemes: Any, schedule: KeyframeSchedule) -> Any:
    """The viseme track at the keyframes only (what the backend renders next to
    :func:`driving_keypoints`), its ``fps`` divided by the ratio so that time in seconds is kept;
    ``None`` stays ``None``. ``visemes`` is a
    :class:`~newsmotion_engine.speech.visemes.VisemeTrack` of ``schedule.frames`` frames."""
    if visemes is None or schedule.ratio == 1:
        return visemes
    if len(visemes) != schedule.frames:
        raise ValueError(f"{len(visemes)} viseme frames for a {schedule.frames}-frame keyframe schedule")
    keep = np.asarray(schedule.keyframes)
    return dataclasses.replace(
        visemes,
        fps=float(visemes.fps) / schedule.ratio,
        **{name: np.ascontiguousarray(np.asarray(getattr(visemes, name))[keep]) for name in ("open", "wide", "round", "energy")},
    )


def keyed_matte(frame: np.ndarray, background: tuple[int, int, int]) -> np.ndarray:
    """uint8 matte: 255 wherever ``frame`` is not exactly the ``background`` colour, else 0."""
    bg = np.array(background, np.uint8)
    return cv2.bitwise_not(cv2.inRange(frame, bg, bg))


class InfillStats(dict):
    """What the stage did, for telemetry: ``ratio``, ``keyframes``, ``infilled``,
    ``generated_fraction``, ``flow_ms`` / ``warp_ms`` (totals), ``infill_ms_per_frame``."""


def infill_frames(
    keyframes: Iterable[np.ndarray],
    schedule: KeyframeSchedule,
    spec: RenderSpec,
    *,
    config: InfillConfig | None = None,
    device: str | None = None,
    stats: InfillStats | None = None,
) -> Iterator[np.ndarray]:
    """Yield the whole clip (``schedule.frames`` frames, in order) from the backend's keyframes.

    Args:
        keyframes: the backend's frames of :func:`driving_keypoints` (uint8 ``[H, W, 3]`` each).
        schedule, spec: from :func:`clip_schedule`; ``spec.background`` is the exact colour.
        config, device: the infill's settings and where it warps (``None``: OpenCV on the CPU;
            ``"cuda"``: torch on the GPU; the flow is DIS on the CPU either way).
        stats: filled in (and updated as frames come out) for telemetry.

    With ``schedule.ratio == 1`` the frames pass through untouched.

    Raises:
        RuntimeError: the backend yielded a number of keyframes other than the schedule's.
    """
    if stats is not None:
        stats.update(ratio=schedule.ratio, keyframes=len(schedule.keyframes), infilled=0,
                     generated_fraction=round(schedule.generated_fraction, 4))  # fmt: skip
    if schedule.ratio == 1:
        yield from keyframes
        return
    infiller = Infiller(schedule.ratio, schedule.frames, loop=schedule.loop, background=spec.background,
                        config=config, device=device)  # fmt: skip
    pushed = 0
    spent = 0.0
    for frame in keyframes:
        if pushed >= len(schedule.keyframes):
            raise RuntimeError(f"the backend yielded more than the {len(schedule.keyframes)} keyframes asked for")
        t0 = time.perf_counter()
        out = infiller.push(frame, keyed_matte(frame, spec.background))
        spent += time.perf_counter() - t0
        pushed += 1
        yield from out
    if pushed != len(schedule.keyframes):
        raise RuntimeError(f"the backend yielded {pushed} of the {len(schedule.keyframes)} keyframes asked for")
    t0 = time.perf_counter()
    out = infiller.flush()
    spent += time.perf_counter() - t0
    if stats is not None:
        st: dict[str, Any] = infiller.stats
        n = int(st["infilled"])
        stats.update(infilled=n, flow_ms=round(st["flow_ms"], 1), warp_ms=round(st["warp_ms"], 1),
                     infill_ms=round(spent * 1e3, 1), infill_ms_per_frame=round(spent * 1e3 / n, 2) if n else 0.0)  # fmt: skip
    yield from out
