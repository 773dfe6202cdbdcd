"""Built-in sample material, made from scikit-image's public-domain astronaut photo (NASA), so a
fresh machine can demo, test and benchmark without downloading anything."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np


def astronaut_rgb() -> np.ndarray:
    """The 512x512 RGB astronaut portrait (Eileen Collins, waist-up) from scikit-image."""
    from skimage import data

    return np.ascontiguousarray(data.astronaut())


@dataclass(frozen=True)
class MovingPhotoFrame:
    """Where the photo was placed in one frame: ``canvas_xy = offset + scale * photo_xy``."""

    scale: float
    offset: tuple[float, float]


def moving_photo_frames(
    photo: np.ndarray, frames: int, width: int, height: int, *, amplitude: float = 0.12, zoom: float = 0.15
) -> Iterator[tuple[np.ndarray, MovingPhotoFrame]]:
    """Frames of ``photo`` sliding side to side and breathing in scale on a grey canvas: a driving
    video with known motion (tests check extraction against the returned transforms)."""
    import cv2

    ph, pw = photo.shape[:2]
    base = 0.8 * min(width / pw, height / ph)
    for i in range(frames):
        phase = 2 * np.pi * i / max(frames, 1)
        scale = base * (1.0 + zoom * np.sin(phase))
        w, h = pw * scale, ph * scale
        ox = (width - w) / 2 + amplitude * width * np.sin(phase)
        oy = (height - h) / 2 + 0.25 * amplitude * height * np.sin(2 * phase)
        matrix = np.float32([[scale, 0, ox], [0, scale, oy]])
        canvas = cv2.warpAffine(
            photo, matrix, (width, height), flags=cv2.INTER_LINEAR, borderValue=(128, 128, 128)
        )
        yield canvas, MovingPhotoFrame(scale=float(scale), offset=(float(ox), float(oy)))


def write_moving_photo_video(
    path: Path, frames: int = 120, width: int = 720, height: int = 1280, fps: int = 30, photo: np.ndarray | None = None
) -> list[MovingPhotoFrame]:
    """Write the moving-photo driving video (mp4v via OpenCV) and return the per-frame transforms."""
    import cv2

    photo = astronaut_rgb() if photo is None else photo
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), fps, (width, height))
    if not writer.isOpened():
        raise RuntimeError(f"OpenCV cannot write {path}")
    transforms = []
    try:
        for frame, transform in moving_photo_frames(photo, frames, width, height):
            writer.write(cv2.cvtColor(frame, cv2.COLOR_RGB2BGR))
            transforms.append(transform)
    finally:
        writer.release()
    return transforms
