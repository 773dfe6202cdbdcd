"""What both Wan backends' sub-caches are made of: the reference frame they encode, the digest of
the parent cache they are keyed on, and the tensor files they are written in."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from newsmotion_engine import cachedir
from newsmotion_engine.errors import CacheCorruptError

__all__ = ["load_tensors", "reference_frame", "save_tensors", "source_digest"]


def source_digest(cache: Any) -> str:
    """The parent cache's source sha256 (or a digest of its whole source record)."""
    src = (getattr(cache, "metadata", None) or {}).get("source") or {}
    return str(src.get("sha256") or cachedir.sha256_json(src))


def reference_frame(persona: Any, width: int, height: int, background: tuple[int, int, int]) -> np.ndarray:
    """The persona's portrait over ``background`` on a ``width`` x ``height`` frame (uint8 RGB),
    placed as every backend places it (fit, bottom-centre)."""
    import cv2

    from newsmotion_engine.render.placement import place_portrait

    portrait = np.asarray(persona.portrait)
    alpha = np.asarray(persona.person_mask).astype(np.float32)[..., None] / 255.0
    bg = np.array(background, np.float32)
    comp = (portrait.astype(np.float32) * alpha + bg * (1 - alpha)).astype(np.uint8)
    ox, oy, pw, ph = place_portrait(portrait.shape[:2], width, height)
    out = np.empty((height, width, 3), np.uint8)
    out[:] = np.array(background, np.uint8)
    scaled = cv2.resize(comp, (max(1, round(pw)), max(1, round(ph))), interpolation=cv2.INTER_AREA)
    x0, y0 = round(ox), round(oy)
    x1, y1 = min(width, x0 + scaled.shape[1]), min(height, y0 + scaled.shape[0])
    sx0, sy0 = max(0, -x0), max(0, -y0)
    out[max(0, y0):y1, max(0, x0):x1] = scaled[sy0 : sy0 + y1 - max(0, y0), sx0 : sx0 + x1 - max(0, x0)]
    return out


def save_tensors(path: Path, tensors: dict[str, Any], metadata: dict[str, str] | None = None) -> None:
    from safetensors.torch import save_file

    save_file({k: v.contiguous() for k, v in tensors.items()}, str(path), metadata=metadata)


def load_tensors(path: Path, expected: dict[str, tuple[int | None, ...]]) -> dict[str, Any]:
    """Memory-mapped safetensors load with a shape check (``None`` = any size)."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        tensors = load_file(str(path))
    except (SafetensorError, OSError, ValueError) as exc:
        raise CacheCorruptError(path, f"not a readable safetensors file ({exc})") from None
    for name, shape in expected.items():
        if name not in tensors:
            raise CacheCorruptError(path, f"lacks tensor {name!r}")
        got = tuple(tensors[name].shape)
        if len(got) != len(shape) or any(s is not None and s != g for s, g in zip(shape, got)):
            raise CacheCorruptError(path, f"tensor {name} has shape {list(got)}, expected {list(shape)}")
    return tensors
