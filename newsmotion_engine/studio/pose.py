"""Poses for the studio: the guidance a render followed, and keypoints re-extracted from clips.

- :func:`followed_keypoints`: the loop retargeted onto the persona, the keypoints the backend was
  asked to follow (the same ``retarget`` call ``render_clip`` makes), from the caches; the render
  page draws them over the clip.
- :class:`PoseTracker`: mediapipe Holistic on each frame pair of an A/B comparison (one tracking
  graph per clip), and per-frame pose errors: A and B against the guidance, and A against B.

Pose error of one frame: the mean distance between corresponding body and hand keypoints that are
confident (>= :data:`CONF`) in both, as a fraction of the frame height; ``None`` when no point is
confident in both (e.g. a random-weights clip in which no person is found).
"""

from __future__ import annotations

import numpy as np

from newsmotion_engine import skeleton as sk
from newsmotion_engine.errors import NewsmotionError
from newsmotion_engine.render.clip import loop_canvas_size
from newsmotion_engine.render.job import load_render_inputs
from newsmotion_engine.render.retarget import retarget
from newsmotion_engine.storage import Storage

__all__ = ["CONF", "PoseTracker", "followed_keypoints", "pose_error"]

CONF = 0.3
# Body and hands: what a gesture is made of (the face's 68 points would outweigh them).
_POINTS = np.r_[np.arange(17), np.arange(sk.LEFT_HAND_START, sk.RIGHT_HAND_START + 21)]


def followed_keypoints(storage: Storage, persona_id: str, loop_id: str) -> tuple[np.ndarray | None, str | None]:
    """``(keypoints [T, 133, 3] normalized to the persona's canvas, None)``, or ``(None, why)``
    when the caches cannot be loaded (missing, stale: the message says what to build)."""
    try:
        inputs = load_render_inputs(storage, persona_id, loop_id)
    except NewsmotionError as exc:
        return None, str(exc)
    portrait_h, portrait_w = np.asarray(inputs.persona.portrait).shape[:2]
    kp = retarget(
        np.asarray(inputs.guidance.keypoints),
        inputs.persona.landmarks,
        loop_size=loop_canvas_size(inputs.guidance),
        persona_size=(int(portrait_w), int(portrait_h)),
    )
    return np.asarray(kp, dtype=np.float32), None


def pose_error(p: np.ndarray, q: np.ndarray, aspect: float) -> float | None:
    """Mean distance between the body+hand points confident in both ``[133, 3]`` poses (normalized
    coordinates), as a fraction of the frame height; ``aspect`` = width / height."""
    p, q = p[_POINTS], q[_POINTS]
    ok = (p[:, 2] >= CONF) & (q[:, 2] >= CONF)
    if not ok.any():
        return None
    d = (p[ok, :2] - q[ok, :2]) * np.array([aspect, 1.0], dtype=np.float32)
    return round(float(np.hypot(d[:, 0], d[:, 1]).mean()), 5)


class PoseTracker:
    """Collects per-frame pose errors over an A/B comparison (see the module docstring).

    Args:
        guide: the followed keypoints ``[T, 133, 3]`` or ``None`` (then only A vs B).
        aspect: width / height of the compared frames.
    """

    def __init__(self, guide: np.ndarray | None, aspect: float):
        from newsmotion_engine.guidance.holistic import HolisticDetector

        self.guide = guide
        self.aspect = float(aspect)
        self._det_a = HolisticDetector()
        try:
            self._det_b = HolisticDetector()
        except BaseException:
            self._det_a.close()
            raise
        self._series: dict[str, list[float | None]] = {"a_vs_guide": [], "b_vs_guide": [], "a_vs_b": []}
        self._found = [0, 0]

    def add(self, frame_a: np.ndarray, frame_b: np.ndarray) -> None:
        kp_a, kp_b = self._det_a.detect(frame_a), self._det_b.detect(frame_b)
        self._found[0] += bool((kp_a[_POINTS, 2] >= CONF).any())
        self._found[1] += bool((kp_b[_POINTS, 2] >= CONF).any())
        index = len(self._series["a_vs_b"])
        ref = self.guide[index] if self.guide is not None and index < len(self.guide) else None
        self._series["a_vs_guide"].append(None if ref is None else pose_error(kp_a, ref, self.aspect))
        self._series["b_vs_guide"].append(None if ref is None else pose_error(kp_b, ref, self.aspect))
        self._series["a_vs_b"].append(pose_error(kp_a, kp_b, self.aspect))

    def errors(self) -> dict[str, list[float | None]]:
        series = dict(self._series)
        if self.guide is None:
            series.pop("a_vs_guide")
            series.pop("b_vs_guide")
        return series

    def notes(self, labels: tuple[str, str]) -> list[str]:
        frames = len(self._series["a_vs_b"])
        notes = [
            f"no person found in {label} by pose extraction in {frames - found} of {frames} frames (pose error left blank there)"
            for label, found in zip(labels, self._found)
            if found < frames
        ]
        if self.guide is None:
            notes.append("pose error against the guidance is not shown: the loop's or persona's cache could not be loaded")
        return notes

    def close(self) -> None:
        self._det_a.close()
        self._det_b.close()
