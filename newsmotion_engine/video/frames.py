"""Reading frames back from a rendered clip (previews, checks, contact sheets)."""

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


def _label(image: np.ndarray, text: str, scale: float = 0.6) -> None:
    """White text with a dark outline in the top-left corner (drawn in place)."""
    for colour, thickness in (((0, 0, 0), 4), ((255, 255, 255), 1)):
        cv2.putText(image, text, (8, 22), cv2.FONT_HERSHEY_SIMPLEX, scale, colour, thickness, cv2.LINE_AA)


def loop_sheet(clips: list[tuple[str, Path | str]], count: int = 6, height: int = 240, title: str | None = None) -> np.ndarray:
    """One row per clip (``(label, mp4)``), ``count`` evenly spaced frames each, ``height`` pixels
    tall, the label over the row's first frame, an optional title bar on top: RGB uint8."""
    rows = []
    for label, path in clips:
        row = contact_sheet_from_video(path, count=count, height=height)
        _label(row, label)
        rows.append(row)
    if not rows:
        raise ValueError("no clips for the contact sheet")
    width = max(r.shape[1] for r in rows)
    rows = [np.pad(r, ((0, 0), (0, width - r.shape[1]), (0, 0))) for r in rows]
    if title:
        bar = np.full((32, width, 3), 32, np.uint8)
        _label(bar, title, 0.55)
        rows.insert(0, bar)
    return np.concatenate(rows, axis=0)


def write_loop_sheet(clips: list[tuple[str, Path | str]], out: Path, **kwargs) -> Path:
    """:func:`loop_sheet` written as a PNG (atomically: temp sibling + rename); returns ``out``."""
    sheet = loop_sheet(clips, **kwargs)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.stem}.tmp.png")
    if not cv2.imwrite(str(tmp), cv2.cvtColor(sheet, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_PNG_COMPRESSION, 9]):
        raise OSError(f"could not write {tmp}")
    tmp.replace(out)
    return out
