"""Reading video files: probe (``open_video``) and decode frames resampled to a target frame rate
(``iter_frames``), with OpenCV's ``cv2.VideoCapture``.

Every unusable input (missing file, not a video, no decodable frame, unknown frame rate) raises
``BadInputError(path, problem)``, one line naming the file.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np

from newsmotion_engine.errors import BadInputError

__all__ = ["VideoInfo", "open_video", "iter_frames", "resampled_frame_count"]


@dataclass(frozen=True)
class VideoInfo:
    """What a video file holds. ``frame_count`` is the container's count (may be approximate for
    some formats; ``iter_frames`` decodes until the stream ends regardless)."""

    path: Path
    width: int
    height: int
    fps: float
    frame_count: int

    @property
    def duration_s(self) -> float:
        return self.frame_count / self.fps


def _capture(path: Path) -> cv2.VideoCapture:
    if not path.exists():
        raise BadInputError(path, "file not found")
    if not path.is_file():
        raise BadInputError(path, "not a file")
    cap = cv2.VideoCapture(str(path))
    if not cap.isOpened():
        cap.release()
        raise BadInputError(path, "not a readable video (OpenCV could not open it)")
    return cap


def open_video(path: str | Path) -> VideoInfo:
    """Probe a video: size, frame rate and frame count, after checking one frame decodes.

    Args:
        path: a video file (mp4, mov, webm, mkv, avi, ... whatever OpenCV's FFmpeg reads).

    Returns:
        ``VideoInfo(path, width, height, fps, frame_count)``.

    Raises:
        BadInputError: missing file, not a video, no decodable frame, or no frame rate.

    Example::

        info = open_video("storage/motion/driving/wave.mp4")
        print(info.width, info.height, info.fps, info.frame_count)
    """
    path = Path(path)
    cap = _capture(path)
    try:
        ok, frame = cap.read()
        if not ok or frame is None:
            raise BadInputError(path, "not a readable video (no decodable frames)")
        fps = float(cap.get(cv2.CAP_PROP_FPS))
        if not (math.isfinite(fps) and fps > 0):
            raise BadInputError(path, "video has no usable frame rate")
        count = int(cap.get(cv2.CAP_PROP_FRAME_COUNT))
        height, width = frame.shape[:2]
        # Some containers report 0 or a negative count; it is only an estimate (progress bars).
        return VideoInfo(
            path=path, width=int(width), height=int(height), fps=fps, frame_count=max(count, 1)
        )
    finally:
        cap.release()


def resampled_frame_count(info: VideoInfo, fps: float | None = None) -> int:
    """How many frames ``iter_frames(info.path, fps)`` yields, judged from the container's frame
    count (exact when that count is): one per output timestamp inside the source's duration."""
    if fps is None:
        return info.frame_count
    # Output k is at k / fps seconds; the source lasts frame_count / src_fps seconds.
    return max(1, math.ceil(info.frame_count * fps / info.fps - 1e-9))


def _source_index(k: int, ratio: float) -> int:
    # Nearest source frame to output timestamp k / out_fps, i.e. k * ratio source frames; the tiny
    # epsilon makes exact halves (e.g. 25 -> 50 fps) land consistently on the earlier frame
    # despite float rounding.
    return int(math.floor(k * ratio + 0.5 - 1e-9))


def iter_frames(path: str | Path, fps: float | None = None) -> Iterator[np.ndarray]:
    """Decode a video as RGB uint8 ``[H, W, 3]`` frames, optionally resampled to ``fps``.

    Resampling picks, for each output timestamp ``k / fps`` inside the source's duration, the
    nearest source frame (frames are dropped when downsampling and repeated when upsampling).
    ``fps=None`` yields every source frame.

    Raises:
        BadInputError: as ``open_video`` (checked before the first frame is yielded).

    Example::

        for rgb in iter_frames("clip.mov", fps=30):
            ...
    """
    path = Path(path)
    info = open_video(path)
    if fps is not None and not fps > 0:
        raise ValueError(f"fps must be positive, got {fps}")
    ratio = 1.0 if fps is None else info.fps / float(fps)
    cap = _capture(path)
    try:
        src_idx = -1  # index of the source frame held in `frame`
        frame = None
        ended = False
        k = 0
        while True:
            want = _source_index(k, ratio)
            while src_idx < want and not ended:
                ok, nxt = cap.read()
                if not ok or nxt is None:
                    ended = True  # the stream is src_idx + 1 frames long
                    break
                frame = nxt
                src_idx += 1
            # Past the end: the timestamp may still fall inside the last frame's interval (its
            # nearest existing frame is then the last one); beyond the duration we are done.
            if src_idx < want and k * ratio >= src_idx + 1 - 1e-9:
                return
            yield cv2.cvtColor(frame, cv2.COLOR_BGR2RGB)
            k += 1
    finally:
        cap.release()
