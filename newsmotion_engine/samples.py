"""Built-in sample material: real photos that ship inside installed packages (nothing is
downloaded, nothing was drawn here), so a fresh machine can demo, test and benchmark offline.

:data:`SAMPLE_PORTRAITS` are the sample anchors, each a different kind of portrait:

- ``astronaut``: scikit-image's ``astronaut`` (NASA portrait of Eileen Collins, public domain),
  waist-up and frontal, one arm holding a helmet, a flag and a model shuttle behind her;
- ``camera``: scikit-image's ``camera`` (the "cameraman", grayscale, CC0 by the photographer Lav
  Varshney), a man in profile with *both arms visible*, bent over a camera on a tripod, cut at
  the thighs;
- ``grace-hopper``: matplotlib's ``grace_hopper.jpg`` sample (US Navy portrait of Grace Hopper,
  public domain), a head-and-shoulders headshot: no arms, no hips.

:data:`SAMPLE_STORY` is the sample story for the ``astronaut`` persona (two sentences, two gesture
cues; ``make demo`` ends with it), a story file shipped in the package.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

__all__ = [
    "SAMPLE_PORTRAITS",
    "SAMPLE_STORY",
    "SamplePortrait",
    "astronaut_rgb",
    "sample_rgb",
    "write_sample_portrait",
    "moving_photo_frames",
    "write_moving_photo_video",
]


def astronaut_rgb() -> np.ndarray:
    """The 512x512 RGB astronaut portrait (Eileen Collins, waist-up) from scikit-image."""
    from skimage import data

    return np.ascontiguousarray(data.astronaut())


def _camera_rgb() -> np.ndarray:
    from skimage import data

    gray = np.asarray(data.camera())
    return np.ascontiguousarray(np.repeat(gray[:, :, None], 3, axis=2))


def _grace_hopper_rgb() -> np.ndarray:
    import matplotlib.cbook
    from PIL import Image

    with Image.open(matplotlib.cbook.get_sample_data("grace_hopper.jpg", asfileobj=False)) as img:
        return np.ascontiguousarray(np.asarray(img.convert("RGB")))


@dataclass(frozen=True)
class SamplePortrait:
    """One sample anchor: where the photo comes from, what kind of portrait it is, its loader."""

    name: str
    kind: str
    origin: str
    load: Callable[[], np.ndarray]


SAMPLE_PORTRAITS: dict[str, SamplePortrait] = {
    sample.name: sample
    for sample in (
        SamplePortrait("astronaut", "waist-up, frontal", "scikit-image data.astronaut() (NASA, public domain)", astronaut_rgb),
        SamplePortrait("camera", "both arms visible, profile, grayscale", "scikit-image data.camera() (Lav Varshney, CC0)", _camera_rgb),
        SamplePortrait(
            "grace-hopper", "headshot (head and shoulders)", "matplotlib sample_data/grace_hopper.jpg (US Navy, public domain)",
            _grace_hopper_rgb,
        ),
    )
}


def sample_rgb(name: str) -> np.ndarray:
    """The RGB uint8 pixels of the sample portrait ``name`` (a key of :data:`SAMPLE_PORTRAITS`)."""
    if name not in SAMPLE_PORTRAITS:
        raise KeyError(f"unknown sample portrait {name!r}; known: {', '.join(SAMPLE_PORTRAITS)}")
    return SAMPLE_PORTRAITS[name].load()


# The sample story (docs/stories.md): the astronaut opens the evening news.
SAMPLE_STORY = Path(__file__).resolve().parent / "story" / "samples" / "evening_news.yaml"


def write_sample_portrait(name: str, folder: Path) -> Path:
    """Write the sample portrait ``name`` as ``{folder}/{name}.png`` (atomically) and return it."""
    import cv2

    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.png"
    tmp = folder / f".{name}.tmp.png"
    if not cv2.imwrite(str(tmp), cv2.cvtColor(sample_rgb(name), cv2.COLOR_RGB2BGR)):
        raise OSError(f"could not write {tmp}")
    tmp.replace(path)
    return path


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
