"""A driving video -> raw loop keypoints ``float32 [T, 133, 3]`` (canonical skeleton, smoothed).

Pipeline: decode and resample the video to the loop frame rate (``videoio.iter_frames``), run
mediapipe Holistic in video (tracking) mode on every frame (``holistic.HolisticDetector``), map
each frame to the 133-point skeleton (parts not found keep confidence 0), then remove detector
jitter with a One Euro filter (``smoothing``).

Everything the output depends on is in ``extractor_params(fps)``; the guidance cache stores it and
treats a cache built with other parameters as stale.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from newsmotion_engine.errors import BadInputError
from newsmotion_engine.guidance import holistic
from newsmotion_engine.guidance.smoothing import DEFAULT_PARAMS, smooth_sequence
from newsmotion_engine.skeleton import PARTS, SKELETON_NAME
from newsmotion_engine.videoio import iter_frames, open_video, resampled_frame_count

__all__ = [
    "EXTRACTOR_NAME",
    "EXTRACTOR_VERSION",
    "MIN_PERSON_FRACTION",
    "extractor_params",
    "extract_keypoints",
]

EXTRACTOR_NAME = "mediapipe-holistic"
# Version of our mapping (face table, feet, confidences), detection settings and smoothing; bump
# whenever any of them changes so cached loops are rebuilt.
EXTRACTOR_VERSION = "1"

# A driving video must show the person in at least this fraction of its frames. Short dropouts
# (a turn, motion blur) are fine and carried as confidence 0; a clip that mostly shows no one is a
# wrong file, and a loop built from it would be mostly empty.
MIN_PERSON_FRACTION = 0.5

_MIN_DETECTION_CONFIDENCE = 0.5


def extractor_params(fps: int) -> dict:
    """Everything the extracted keypoints depend on, JSON-able (stored in the cache metadata).

    Example::

        >>> extractor_params(30)["smoothing"]
        {'filter': 'one-euro', 'min_cutoff': 1.0, 'beta': 10.0, 'd_cutoff': 1.0}
    """
    return {
        "extractor": EXTRACTOR_NAME,
        "extractor_version": EXTRACTOR_VERSION,
        "mediapipe_version": holistic.mediapipe_version(),
        "model_complexity": holistic.MEDIAPIPE_MODEL_COMPLEXITY,
        "refine_face_landmarks": False,
        "min_detection_confidence": _MIN_DETECTION_CONFIDENCE,
        "skeleton": SKELETON_NAME,
        "part_confidence": holistic.PART_CONFIDENCE,
        "min_person_fraction": MIN_PERSON_FRACTION,
        "smoothing": {"filter": "one-euro", **DEFAULT_PARAMS.to_dict()},
        "fps": int(fps),
    }


def extract_keypoints(
    video_path: str | Path,
    *,
    fps: int = 30,
    max_seconds: float | None = None,
    progress: Callable[[int, int], None] | None = None,
    smooth: bool = True,
) -> np.ndarray:
    """Extract whole-body keypoints from a driving video.

    Args:
        video_path: any video OpenCV reads; resampled to ``fps`` (nearest source frame).
        fps: output frame rate (the loop's).
        max_seconds: only the first ``max_seconds`` of the video (None = all of it).
        progress: called as ``progress(done, total)`` after each frame; ``total`` is estimated
            from the container's frame count, and the last call is ``(T, T)``.
        smooth: apply the One Euro filter (default). ``False`` returns the per-frame detections
            as they are, for tests and diagnostics; ``extractor_params`` describes the smoothed
            output only.

    Returns:
        float32 ``[T, 133, 3]``: x, y normalized to the frame, confidence (0 = not detected).

    Raises:
        BadInputError: not a readable video, or no person detected in more than half of the frames
            (``MIN_PERSON_FRACTION``).

    Example::

        kp = extract_keypoints("storage/motion/driving/wave.mp4", fps=30, max_seconds=4)
    """
    path = Path(video_path)
    if not (isinstance(fps, int) and fps > 0):
        raise ValueError(f"fps must be a positive int, got {fps!r}")
    if max_seconds is not None and not max_seconds > 0:
        raise ValueError(f"max_seconds must be positive, got {max_seconds!r}")

    info = open_video(path)
    total = resampled_frame_count(info, fps)
    limit = None if max_seconds is None else max(1, int(round(max_seconds * fps)))
    if limit is not None:
        total = min(total, limit)

    frames: list[np.ndarray] = []
    with holistic.HolisticDetector(
        static_image_mode=False, min_detection_confidence=_MIN_DETECTION_CONFIDENCE
    ) as det:
        for rgb in iter_frames(path, fps):
            if limit is not None and len(frames) >= limit:
                break
            frames.append(det.detect(rgb))
            if progress is not None:
                done = len(frames)
                progress(done, max(total, done))
    if not frames:
        raise BadInputError(path, "not a readable video (no decodable frames)")
    kp = np.stack(frames).astype(np.float32)
    n = kp.shape[0]
    if progress is not None and total != n:
        progress(n, n)  # the container's frame count was off; finish the bar at the real count

    # Holistic finds face and hands only through the pose, so "person present" = any body point.
    with_person = int((kp[:, PARTS["body"], 2] > 0).any(axis=1).sum())
    if with_person == 0:
        raise BadInputError(path, f"no person detected in any of its {n} frames")
    if with_person < MIN_PERSON_FRACTION * n:
        raise BadInputError(
            path,
            f"no person detected in {n - with_person} of {n} frames; a driving video must show "
            f"one person in at least {MIN_PERSON_FRACTION:.0%} of them",
        )
    if smooth:
        kp = smooth_sequence(kp, fps, **DEFAULT_PARAMS.to_dict())
    return kp
