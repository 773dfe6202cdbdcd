"""Pose fidelity: does a rendered clip show the pose it was asked to follow? Measured on the mp4.

Any backend, weights or not, is judged the same way: the rendered mp4 is read back frame by frame
(:func:`newsmotion_engine.videoio.iter_frames`, streamed, never the whole clip in memory), every
``stride``-th frame goes through the same mediapipe holistic extractor that turns driving videos
into loops (:class:`newsmotion_engine.guidance.holistic.HolisticDetector`), and the keypoints
found are compared with the retargeted keypoints the backend was given.

Each compared frame is read as a still (``static_image_mode``, no tracking between frames). The
extractor's video mode tracks landmarks from frame to frame, and on a clip that does not move at
all it drifts: a perfect render of a still loop (the rest frame repeated) scores well under 1 in
video mode and 1.0 read as stills (measured with :func:`measure_frames`; docs/benchmarks.md).
A measurement that fails a perfect render
judges the tracker, not the backend; read as stills, every frame and the rest frame of the
calibration are read the same way.

What is compared: the joints the persona shows (its landmark confidence at least
:data:`VISIBLE_CONFIDENCE` and the landmark inside the portrait, :func:`persona_visible`; a
headshot's hips, a hand below or a wrist past the photo's edge are left out) that
the loop asks for in that frame and that lie inside the frame, in five parts (:data:`PARTS`):
head (nose, eyes, ears), torso (shoulders, hips), arms (elbows, wrists), hands (2 x 21) and face
(iBUG-68). Legs and feet are not compared (an anchor is cut at the waist).

Figures (all in output pixels):

- ``pck``: PCK@``alpha`` (default 0.05): the share of compared joint-frames whose re-extracted
  position lies within ``alpha x normalizer`` of the intended one; a joint the extractor does
  not find counts as a miss. ``pck_body`` is the same over head, torso and arm joints: the
  target figure (>= :data:`TARGET_PCK`). ``per_part`` gives it per part.
- ``normalizer``: the persona's torso size at rest in the output frame: neck (mid-shoulders) to
  mid-hips when both hips are visible (``"torso"``), else the shoulder width
  (``"shoulder_width"``; a waist-up portrait often cuts the hips), and only for a portrait
  without both shoulders the head size, the jaw's width (``"head"``).
- ``mean_px``: mean distance between re-extracted and intended position over the joints found.
- ``motion_energy_ratio``: rendered joint displacement / intended joint displacement, over head,
  torso and arm joints, as a least-squares gain: with ``r`` and ``i`` a joint's rendered and
  intended positions minus their means over the compared frames where it was found,
  ``sum <r, i> / sum |i|^2``. A render that follows scores 1, a frozen one 0, one at half the
  amplitude 0.5, an exaggerated one above 1; the extractor's jitter, uncorrelated with the
  intended motion, averages out instead of counting as motion (a plain ratio of magnitudes,
  ``sum |r| / sum |i|``, is kept as ``motion_magnitude_ratio`` per part: jitter inflates it on
  joints that barely move). ``None`` when the loop barely moves those joints (below
  :data:`MIN_INTENDED_MOTION_PX` per joint-frame) or nothing was found.

Calibration. The persona's landmarks were found on the portrait as a whole; the extractor reading
a rendered frame (a tighter medium shot, the body cut at the chest) places some joints elsewhere
even when nothing moved: measured on the sample astronaut, its shoulders 30-100 px off the
stored landmarks at rest. That is the extractor's disagreement, not the backend's, so before
comparing, the persona at rest as a backend shows it (:func:`rest_frame`) is read once and each
joint's offset (extractor at rest minus the landmark) is subtracted from that joint's readings:
a render that follows exactly scores 1 whatever the extractor's bias on this appearance. The
uncalibrated figures are kept in ``calibration["raw"]``.

Where the persona canvas lands in the output frame is the placement every backend shares
(:func:`newsmotion_engine.render.placement.place_portrait`: scaled to fit, centred, bottom-anchored).

mediapipe is not installed on the GPU machine: there, and whenever it cannot run, the result is
``None`` with a reason (:func:`measure_render`), never an exception. The engine stays free of
Dagster; the Dagster asset check and the scorecard read the record from the telemetry.

Example::

    fidelity, reason = measure_render("out/anna/nod/warp.mp4", retargeted, persona.landmarks,
                                      portrait_hw=(1280, 720), width=720, height=1280)
    fidelity.pck_body, fidelity.motion_energy_ratio
"""

from __future__ import annotations

import importlib.util
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from newsmotion_engine.render.placement import to_frame_pixels
from newsmotion_engine.render.telemetry import PoseFidelity
from newsmotion_engine.skeleton import BODY, FACE_START, LEFT_HAND_START, NUM_KEYPOINTS, RIGHT_HAND_START

__all__ = [
    "FIDELITY_VERSION",
    "FidelityConfig",
    "PARTS",
    "TARGET_PARTS",
    "TARGET_PCK",
    "TARGET_MOTION_ENERGY",
    "Detector",
    "mediapipe_available",
    "measure_render",
    "persona_visible",
    "score_pose",
    "frame_placement",
    "torso_normalizer",
    "fidelity_problems",
    "rest_frame",
]

# Bump when a figure's definition changes (part of every record).
# 2: a persona joint outside the portrait is not visible; frames are read as stills.
FIDELITY_VERSION = 2
# The targets: PCK over the visible head, torso and arm joints, and motion energy.
TARGET_PCK = 0.9
TARGET_MOTION_ENERGY = 0.8
# A persona landmark / intended keypoint at or above this confidence is "visible" (the persona
# cache's own visible threshold); a re-extracted one at or above it is "found".
VISIBLE_CONFIDENCE = 0.3
DETECTED_CONFIDENCE = 0.3
# Below this mean intended displacement (px per joint-frame) a loop does not move the joints
# enough for a ratio to mean anything.
MIN_INTENDED_MOTION_PX = 0.5

PARTS: dict[str, tuple[int, ...]] = {
    "head": tuple(BODY[n] for n in ("nose", "left_eye", "right_eye", "left_ear", "right_ear")),
    "torso": tuple(BODY[n] for n in ("left_shoulder", "right_shoulder", "left_hip", "right_hip")),
    "arms": tuple(BODY[n] for n in ("left_elbow", "right_elbow", "left_wrist", "right_wrist")),
    "hands": tuple(range(LEFT_HAND_START, LEFT_HAND_START + 21)) + tuple(range(RIGHT_HAND_START, RIGHT_HAND_START + 21)),
    "face": tuple(range(FACE_START, FACE_START + 68)),
}
TARGET_PARTS = ("head", "torso", "arms")


@dataclass(frozen=True)
class FidelityConfig:
    """Whether and how a render job measures pose fidelity (on by default).

    Args:
        enabled: measure after each render (``False``: the record says "turned off").
        stride: compare every ``stride``-th frame (1 = every frame). The extractor costs ~60 ms a
            frame on 2 CPU cores, so the default 4 keeps a 120-frame loop near 2 s.
        alpha: the PCK threshold as a fraction of the normalizer.
    """

    enabled: bool = True
    stride: int = 4
    alpha: float = 0.05

    def __post_init__(self) -> None:
        if not isinstance(self.stride, int) or isinstance(self.stride, bool) or self.stride < 1:
            raise ValueError(f"fidelity stride must be a positive integer, got {self.stride!r}")
        if not 0 < float(self.alpha) < 1:
            raise ValueError(f"fidelity alpha must be in (0, 1), got {self.alpha!r}")


class Detector(Protocol):
    """What the measurement needs from an extractor: RGB uint8 frame -> float32 [133, 3]
    normalized to the frame (confidence 0 = not found)."""

    def detect(self, rgb: np.ndarray) -> np.ndarray: ...


def mediapipe_available() -> bool:
    """Whether mediapipe can be imported here (it is not installed on the GPU machine)."""
    return importlib.util.find_spec("mediapipe") is not None


def frame_placement(portrait_hw: tuple[int, int], width: int, height: int) -> tuple[float, float, float, float]:
    """``(ox, oy, w, h)``: where the persona canvas lands on a ``width`` x ``height`` frame (the
    placement every backend uses)."""
    from newsmotion_engine.render.placement import place_portrait

    return place_portrait(portrait_hw, width, height)


def persona_visible(persona_landmarks: np.ndarray) -> np.ndarray:
    """Which joints the persona shows ``[133]``: landmark confidence at least
    :data:`VISIBLE_CONFIDENCE` *and* the landmark inside the portrait canvas. The extractor gives
    joints past the photo's edge a position and often a fair confidence (the cameraman's left
    wrist: 0.69, at x = 1.03 of the canvas); such a joint is not shown, so it is not compared
    (the issue: the target is over the joints visible in the persona)."""
    lm = np.asarray(persona_landmarks, np.float64)
    inside = (lm[:, 0] >= 0.0) & (lm[:, 0] < 1.0) & (lm[:, 1] >= 0.0) & (lm[:, 1] < 1.0)
    return (lm[:, 2] >= VISIBLE_CONFIDENCE) & inside


def torso_normalizer(rest_px: np.ndarray, rest_ok: np.ndarray) -> dict[str, Any] | None:
    """The PCK normalizer of a persona at rest (``rest_px`` [133, 2] output pixels, ``rest_ok``
    [133] visible): ``{"kind", "px"}`` (see the module docstring), or ``None`` when the persona
    shows neither both shoulders nor a face."""
    ls, rs, lh, rh = (BODY[n] for n in ("left_shoulder", "right_shoulder", "left_hip", "right_hip"))
    if rest_ok[ls] and rest_ok[rs]:
        neck = 0.5 * (rest_px[ls] + rest_px[rs])
        if rest_ok[lh] and rest_ok[rh]:
            length = float(np.linalg.norm(neck - 0.5 * (rest_px[lh] + rest_px[rh])))
            if length > 1.0:
                return {"kind": "torso", "px": round(length, 2)}
        width = float(np.linalg.norm(rest_px[ls] - rest_px[rs]))
        if width > 1.0:
            return {"kind": "shoulder_width", "px": round(width, 2)}
    jaw_l, jaw_r = FACE_START + 0, FACE_START + 16
    if rest_ok[jaw_l] and rest_ok[jaw_r]:
        width = float(np.linalg.norm(rest_px[jaw_l] - rest_px[jaw_r]))
        if width > 1.0:
            return {"kind": "head", "px": round(width, 2)}
    return None


def rest_frame(portrait: np.ndarray, person_mask: np.ndarray, width: int, height: int, background: tuple[int, int, int]) -> np.ndarray:
    """The persona at rest as a backend shows it on a ``width`` x ``height`` frame: the portrait
    composited over ``background`` with its matte, at the shared placement. RGB uint8."""
    import cv2

    ox, oy, w, h = frame_placement(np.asarray(portrait).shape[:2], width, height)
    alpha = np.asarray(person_mask, np.float32)[..., None] / 255.0
    bg = np.array(background, np.float32)
    comp = np.asarray(portrait, np.float32) * alpha + bg * (1.0 - alpha)
    size = (max(1, round(w)), max(1, round(h)))
    small = cv2.resize(comp, size, interpolation=cv2.INTER_AREA if size[0] < comp.shape[1] else cv2.INTER_LINEAR)
    frame = np.empty((height, width, 3), np.float32)
    frame[:] = bg
    x0, y0 = int(round(ox)), int(round(oy))
    xs, ys = max(0, x0), max(0, y0)
    xe, ye = min(width, x0 + size[0]), min(height, y0 + size[1])
    frame[ys:ye, xs:xe] = small[ys - y0 : ye - y0, xs - x0 : xe - x0]
    return np.clip(frame + 0.5, 0, 255).astype(np.uint8)


def _round(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(float(value), digits)


def _motion(det: np.ndarray, want: np.ndarray, found: np.ndarray) -> tuple[float, float, float, float]:
    """Motion of joints [F, J, 2] about each joint's mean over the frames it was found in:
    ``(sum <r, i>, sum |i|^2, sum |r|, sum |i|)`` (see the module docstring)."""
    w = found[..., None].astype(np.float64)
    n = np.maximum(w.sum(axis=0), 1.0)
    r = (det - (det * w).sum(axis=0) / n) * w
    i = (want - (want * w).sum(axis=0) / n) * w
    return (
        float((r * i).sum()),
        float((i * i).sum()),
        float(np.linalg.norm(r, axis=-1).sum()),
        float(np.linalg.norm(i, axis=-1).sum()),
    )


def score_pose(
    detected_px: np.ndarray,
    detected_ok: np.ndarray,
    intended_px: np.ndarray,
    compare: np.ndarray,
    normalizer: dict[str, Any],
    *,
    alpha: float = 0.05,
) -> dict[str, Any]:
    """The figures over compared frames: ``detected_px`` / ``intended_px`` [F, 133, 2] output
    pixels, ``detected_ok`` [F, 133] (found by the extractor), ``compare`` [F, 133] (visible in
    the persona, asked for, inside the frame). Returns ``pck``, ``pck_body``, ``per_part``,
    ``mean_px``, ``motion_energy_ratio``, ``threshold_px``, ``joints``, ``detected_fraction``.
    """
    threshold = alpha * float(normalizer["px"])
    err = np.linalg.norm(detected_px - intended_px, axis=-1)
    found = compare & detected_ok
    hit = found & (err <= threshold)

    def figures(idx: tuple[int, ...]) -> dict[str, Any]:
        sel = np.asarray(idx)
        n = int(compare[:, sel].sum())
        if n == 0:
            return {"pck": None, "mean_px": None, "motion_energy_ratio": None, "joints": 0}
        f = found[:, sel]
        dot, intended_sq, rendered, intended = _motion(detected_px[:, sel], intended_px[:, sel], f)
        moving = f.any() and intended >= MIN_INTENDED_MOTION_PX * int(f.sum())
        return {
            "pck": _round(hit[:, sel].sum() / n),
            "mean_px": _round(err[:, sel][f].mean(), 2) if f.any() else None,
            "motion_energy_ratio": _round(dot / intended_sq) if moving else None,
            "motion_magnitude_ratio": _round(rendered / intended) if moving else None,
            "intended_motion_px": _round(intended / max(int(f.sum()), 1), 2),
            "joints": int(compare[:, sel].any(axis=0).sum()),
        }

    per_part = {name: figures(idx) for name, idx in PARTS.items()}
    everything = tuple(i for idx in PARTS.values() for i in idx)
    body = tuple(i for name in TARGET_PARTS for i in PARTS[name])
    overall, target = figures(everything), figures(body)
    total = int(compare.sum())
    return {
        "pck": overall["pck"],
        "pck_body": target["pck"],
        "per_part": per_part,
        "mean_px": overall["mean_px"],
        "motion_energy_ratio": target["motion_energy_ratio"],
        "threshold_px": round(threshold, 3),
        "joints": overall["joints"],
        "detected_fraction": round(float(found.sum()) / total, 4) if total else 0.0,
    }


def _holistic_detector() -> Any:
    from newsmotion_engine.guidance.holistic import HolisticDetector

    # Stills, not video mode: see the module docstring (the tracker drifts on a frozen clip).
    return HolisticDetector(static_image_mode=True)


def extractor_name() -> str:
    from newsmotion_engine.guidance.holistic import mediapipe_version

    return f"mediapipe-holistic {mediapipe_version()} (stills)"


def measure_frames(
    frames: Iterable[np.ndarray],
    intended: np.ndarray,
    persona_landmarks: np.ndarray,
    *,
    portrait_hw: tuple[int, int],
    config: FidelityConfig = FidelityConfig(),
    detector: Detector,
    extractor: str = "custom",
    rest_frame: np.ndarray | None = None,
    rest_detector: Detector | None = None,
) -> tuple[PoseFidelity | None, str | None]:
    """Measure frames (RGB uint8, in order; the clip's) against ``intended`` [T, 133, 3]
    (normalized to the persona canvas, ``portrait_hw`` = its (height, width)) with ``detector``.
    ``rest_frame``: the persona at rest as a backend would show it (:func:`rest_frame`), read by
    ``rest_detector`` (default ``detector``) to calibrate the extractor (see the module docstring);
    ``None``: no calibration. Returns ``(PoseFidelity, None)`` or ``(None, reason)``."""
    started = time.perf_counter()
    intended = np.asarray(intended, np.float64)
    lm = np.asarray(persona_landmarks, np.float64)
    if intended.ndim != 3 or intended.shape[1:] != (NUM_KEYPOINTS, 3):
        raise ValueError(f"intended keypoints have shape {intended.shape}; expected [T, {NUM_KEYPOINTS}, 3]")
    total = intended.shape[0]
    detected: list[np.ndarray] = []
    indices: list[int] = []
    size: tuple[int, int] | None = None
    count = 0
    for i, rgb in enumerate(frames):
        count += 1
        if i >= total:
            continue
        if size is None:
            size = (int(rgb.shape[1]), int(rgb.shape[0]))
        if i % config.stride == 0:
            detected.append(np.asarray(detector.detect(rgb), np.float64))
            indices.append(i)
    if size is None or not indices:
        return None, "the clip has no decodable frames to compare"
    width, height = size
    placement = frame_placement(portrait_hw, width, height)
    rest_px = to_frame_pixels(lm, placement)
    rest_ok = persona_visible(lm)
    normalizer = torso_normalizer(rest_px, rest_ok)
    if normalizer is None:
        return None, "the persona shows neither both shoulders nor a face: nothing to normalize PCK by"
    want = intended[indices]
    want_px = to_frame_pixels(want, placement)
    inside = (want_px[..., 0] >= 0) & (want_px[..., 0] < width) & (want_px[..., 1] >= 0) & (want_px[..., 1] < height)
    compare = rest_ok[None, :] & (want[..., 2] >= VISIBLE_CONFIDENCE) & inside
    det = np.stack(detected)
    det_px = det[..., :2] * np.array([width, height], np.float64)
    det_ok = det[..., 2] >= DETECTED_CONFIDENCE
    if not compare.any():
        return None, "no joint of the compared parts is visible in the persona and asked for by the loop"
    raw = score_pose(det_px, det_ok, want_px, compare, normalizer, alpha=config.alpha)
    offset = np.zeros((NUM_KEYPOINTS, 2))
    calibrated = np.zeros(NUM_KEYPOINTS, bool)
    if rest_frame is not None:
        rest = np.asarray((rest_detector or detector).detect(rest_frame), np.float64)
        rest_found = (rest[:, 2] >= DETECTED_CONFIDENCE) & rest_ok
        rest_det_px = rest[:, :2] * np.array([rest_frame.shape[1], rest_frame.shape[0]], np.float64)
        rest_det_px = rest_det_px * np.array([width / rest_frame.shape[1], height / rest_frame.shape[0]])
        offset[rest_found] = rest_det_px[rest_found] - rest_px[rest_found]
        calibrated = rest_found
    figures = score_pose(det_px - offset[None], det_ok, want_px, compare, normalizer, alpha=config.alpha)
    comp_idx = np.asarray([i for idx in PARTS.values() for i in idx])
    compared_joints = compare.any(axis=0)
    calibration = {
        "rest_frame": rest_frame is not None,
        "joints_calibrated": int((calibrated & compared_joints)[comp_idx].sum()),
        "mean_offset_px": _round(float(np.linalg.norm(offset[calibrated & compared_joints], axis=-1).mean()), 2)
        if (calibrated & compared_joints).any() else None,
        "raw": {k: raw[k] for k in ("pck", "pck_body", "mean_px", "motion_energy_ratio")},
        "raw_per_part_pck": {name: part["pck"] for name, part in raw["per_part"].items()},
    }
    energy = figures["motion_energy_ratio"]
    pck_body = figures["pck_body"]
    meets = pck_body is not None and pck_body >= TARGET_PCK and energy is not None and energy >= TARGET_MOTION_ENERGY
    return (
        PoseFidelity(
            version=FIDELITY_VERSION,
            pck=figures["pck"],
            pck_body=pck_body,
            per_part=figures["per_part"],
            mean_px=figures["mean_px"],
            motion_energy_ratio=energy,
            normalizer=normalizer,
            alpha=float(config.alpha),
            threshold_px=figures["threshold_px"],
            frames=min(count, total),
            frames_compared=len(indices),
            stride=config.stride,
            joints=figures["joints"],
            detected_fraction=figures["detected_fraction"],
            extractor=extractor,
            calibration=calibration,
            targets={"pck_body": TARGET_PCK, "motion_energy_ratio": TARGET_MOTION_ENERGY, "parts": list(TARGET_PARTS)},
            meets_targets=bool(meets),
            seconds=round(time.perf_counter() - started, 3),
        ),
        None,
    )


def measure_render(
    video_path: Path | str,
    intended: np.ndarray,
    persona_landmarks: np.ndarray,
    *,
    portrait_hw: tuple[int, int],
    config: FidelityConfig = FidelityConfig(),
    detector_factory: Callable[[], Any] | None = None,
    rest: np.ndarray | None = None,
) -> tuple[PoseFidelity | None, str | None]:
    """Measure a rendered mp4 against the keypoints it was asked to follow.

    Args:
        video_path: the rendered clip.
        intended: float [T, 133, 3], the retargeted keypoints the backend got (normalized to the
            persona canvas).
        persona_landmarks: float [133, 3], the persona's rest landmarks (which joints it shows).
        portrait_hw: the persona canvas' (height, width).
        config: stride and PCK alpha; ``enabled=False`` returns ``(None, "turned off ...")``.
        detector_factory: a context-manager detector; default mediapipe holistic reading every
            compared frame as a still (see the module docstring).
        rest: the persona at rest at the clip's size (:func:`rest_frame`), for the calibration;
            read by a still-image detector (``None``: uncalibrated).

    Returns:
        ``(PoseFidelity, None)``, or ``(None, reason)`` when it was not measured: turned off,
        mediapipe not installed (the GPU machine), the extractor failed, nothing comparable.
        Never raises for those.
    """
    from newsmotion_engine.errors import NewsmotionError
    from newsmotion_engine.videoio import iter_frames

    if not config.enabled:
        return None, "turned off (fidelity disabled in the render configuration)"
    extractor = "custom"
    if detector_factory is None:
        if not mediapipe_available():
            return None, "mediapipe is not installed here: pose fidelity needs its holistic extractor"
        detector_factory = _holistic_detector
        extractor = extractor_name()
    try:
        detector = detector_factory()
    except Exception as exc:  # a broken mediapipe install must not lose the render
        return None, f"the pose extractor could not start ({type(exc).__name__}: {exc})"
    try:
        with detector:
            # The rest frame is read by the same still-image extractor as the clip's frames.
            return measure_frames(
                iter_frames(video_path), intended, persona_landmarks, portrait_hw=portrait_hw,
                config=config, detector=detector, extractor=extractor, rest_frame=rest,
            )  # fmt: skip
    except NewsmotionError as exc:
        return None, f"the clip could not be read back ({exc})"


def fidelity_problems(fidelity: PoseFidelity | None, reason: str | None = None) -> list[str]:
    """What keeps a render's pose fidelity from its targets, as sentences (``[]`` when it meets
    both): the one rule the Dagster check and the bench share. An unmeasured render is a problem
    too (its ``reason`` is given), so a check cannot pass on nothing."""
    if fidelity is None:
        return [f"pose fidelity not measured: {reason or 'no reason recorded'}"]
    problems = []
    if fidelity.pck_body is None:
        problems.append("no head, torso or arm joint of the persona was compared")
    elif fidelity.pck_body < TARGET_PCK:
        problems.append(f"pck over head, torso and arms {fidelity.pck_body:.3f} < {TARGET_PCK}")
    energy = fidelity.motion_energy_ratio
    if energy is None:
        problems.append("motion energy not measurable (the loop barely moves the compared joints, or none was found)")
    elif energy < TARGET_MOTION_ENERGY:
        problems.append(f"motion energy ratio {energy:.3f} < {TARGET_MOTION_ENERGY}")
    return problems
