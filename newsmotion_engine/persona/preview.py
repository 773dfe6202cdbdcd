"""A one-glance PNG of a persona cache: portrait | person matte | face mask over the portrait |
landmarks drawn, side by side at half canvas size."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np

from newsmotion_engine import cachedir, skeleton
from newsmotion_engine.persona.cache import PersonaCache

__all__ = ["write_preview", "preview_image"]

PANEL_SCALE = 0.5
# COCO-17 limbs, drawn between body keypoints.
_BODY_EDGES = (
    (0, 1), (0, 2), (1, 3), (2, 4),
    (5, 6), (5, 7), (7, 9), (6, 8), (8, 10),
    (5, 11), (6, 12), (11, 12), (11, 13), (13, 15), (12, 14), (14, 16),
)
_COLORS = {  # RGB
    "body": (255, 200, 0),
    "feet": (255, 120, 0),
    "face": (0, 220, 255),
    "left_hand": (255, 60, 200),
    "right_hand": (60, 255, 60),
}
_MIN_CONF = 0.3


def _label(panel: np.ndarray, text: str) -> None:
    cv2.putText(panel, text, (8, 22), cv2.FONT_HERSHEY_SIMPLEX, 0.6, (0, 0, 0), 3, cv2.LINE_AA)
    cv2.putText(panel, text, (8, 22), cv2.FONT_HERSHEY_SIMPLEX, 0.6, (255, 255, 255), 1, cv2.LINE_AA)


def _draw_landmarks(panel: np.ndarray, landmarks: np.ndarray) -> None:
    h, w = panel.shape[:2]
    pts = landmarks[:, :2] * np.array([w, h], np.float32)
    ok = landmarks[:, 2] >= _MIN_CONF

    def line(a: int, b: int, color: tuple[int, int, int]) -> None:
        if ok[a] and ok[b]:
            cv2.line(panel, tuple(np.round(pts[a]).astype(int)), tuple(np.round(pts[b]).astype(int)), color, 2, cv2.LINE_AA)

    for a, b in _BODY_EDGES:
        line(a, b, _COLORS["body"])
    for start, part in ((skeleton.LEFT_HAND_START, "left_hand"), (skeleton.RIGHT_HAND_START, "right_hand")):
        for a, b in skeleton.HAND_EDGES:
            line(start + a, start + b, _COLORS[part])
    for part, sl in skeleton.PARTS.items():
        radius = 1 if part in ("face", "left_hand", "right_hand") else 3
        for i in range(sl.start, sl.stop):
            if ok[i]:
                cv2.circle(panel, tuple(np.round(pts[i]).astype(int)), radius, _COLORS[part], -1, cv2.LINE_AA)


def preview_image(cache: PersonaCache) -> np.ndarray:
    """The preview as an RGB uint8 array (4 panels side by side)."""
    height, width = cache.portrait.shape[:2]
    size = (round(width * PANEL_SCALE), round(height * PANEL_SCALE))
    portrait = cv2.resize(np.asarray(cache.portrait), size, interpolation=cv2.INTER_AREA)
    person = cv2.resize(np.asarray(cache.person_mask), size, interpolation=cv2.INTER_AREA)
    face = cv2.resize(np.asarray(cache.face_mask), size, interpolation=cv2.INTER_AREA).astype(np.float32) / 255.0
    matte = np.repeat(person[:, :, None], 3, axis=2)
    tint = np.array([255, 60, 60], np.float32)
    face_panel = (portrait * (1 - 0.6 * face[:, :, None]) + tint * 0.6 * face[:, :, None]).astype(np.uint8)
    marks = (portrait.astype(np.float32) * 0.6).astype(np.uint8)
    _draw_landmarks(marks, np.asarray(cache.landmarks))
    panels = [portrait.copy(), matte, face_panel, marks]
    for panel, text in zip(panels, ("portrait", f"matte ({cache.matte_method})", "face mask", "landmarks")):
        _label(panel, text)
    return np.concatenate(panels, axis=1)


def write_preview(cache: PersonaCache, out_path: str | Path) -> Path:
    """Write the preview PNG (portrait, matte, face mask, landmarks side by side) to ``out_path``
    atomically (temp file + rename) and return its path.

    Example::

        write_preview(load_persona(store, "astronaut"), "astronaut_preview.png")
    """
    out_path = Path(out_path)
    bgr = cv2.cvtColor(preview_image(cache), cv2.COLOR_RGB2BGR)
    ok, encoded = cv2.imencode(".png", bgr)
    if not ok:
        raise OSError(f"could not encode the preview for {cache.persona_id}")
    with cachedir.replacing(out_path) as tmp:
        tmp.write_bytes(encoded.tobytes())
    return out_path
