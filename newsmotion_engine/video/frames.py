"""Reading frames back from a rendered clip (previews, checks)."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np

from newsmotion_engine.errors import BadInputError


def sample_frames(path: Path | str, count: int = 6) -> list[np.ndarray]:
    """``count`` evenly spaced RGB frames of a video (fewer if it is shorter)."""
    cap = cv2.VideoCapture(str(path))
    try:
        total = int(cap.get(cv2.CAP_PROP_FRAME_COUNT))
        if not cap.isOpened() or total <= 0:
            raise BadInputError(path, "not a readable video")
        frames = []
        for index in np.linspace(0, total - 1, min(count, total)).round().astype(int):
            cap.set(cv2.CAP_PROP_POS_FRAMES, int(index))
            ok, bgr = cap.read()
            if ok:
                frames.append(cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB))
        return frames
    finally:
        cap.release()


def contact_sheet_from_video(path: Path | str, count: int = 6, height: int = 320) -> np.ndarray:
    """Evenly spaced frames of a clip side by side, each scaled to ``height`` pixels tall."""
    frames = sample_frames(path, count)
    if not frames:
        raise BadInputError(path, "no decodable frames")
    scaled = [cv2.resize(f, (round(f.shape[1] * height / f.shape[0]), height), interpolation=cv2.INTER_AREA) for f in frames]
    return np.concatenate(scaled, axis=1)
