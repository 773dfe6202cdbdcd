"""What both Wan backends' sub-caches are made of: the reference frame they encode, the digest of
the parent cache they are keyed on, and the one format they are stored in.

The format: float32 ``.npy`` arrays in a :mod:`newsmotion_engine.cachedir` cache (each backend's
``caches`` module declares them as a ``CacheSchema`` of ``ArraySpec``), written atomically into a
temporary sibling (:func:`save_arrays` inside :func:`cachedir.write_cache`), validated on read
(metadata, byte sizes, dtype and shape pattern) and memory-mapped; :func:`check_shape` pins the
sizes a read knows (segments, latent frames, latent size), :func:`as_tensor` copies an array into
process memory once, as a render hands it to the device."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from newsmotion_engine import cachedir
from newsmotion_engine.errors import CacheCorruptError

__all__ = ["F32", "as_tensor", "check_shape", "place_on_frame", "reference_frame", "reference_mask", "save_arrays", "source_digest"]

F32 = "float32"


def source_digest(cache: Any) -> str:
    """The parent cache's source sha256 (or a digest of its whole source record)."""
    src = (getattr(cache, "metadata", None) or {}).get("source") or {}
    return str(src.get("sha256") or cachedir.sha256_json(src))


def reference_frame(persona: Any, width: int, height: int, background: tuple[int, int, int]) -> np.ndarray:
    """The persona's portrait over ``background`` on a ``width`` x ``height`` frame (uint8 RGB),
    placed as every backend places it (fit, bottom-centre)."""
    portrait = np.asarray(persona.portrait)
    alpha = np.asarray(persona.person_mask).astype(np.float32)[..., None] / 255.0
    bg = np.array(background, np.float32)
    comp = (portrait.astype(np.float32) * alpha + bg * (1 - alpha)).astype(np.uint8)
    return place_on_frame(comp, width, height, np.array(background, np.uint8))


def reference_mask(persona: Any, width: int, height: int) -> np.ndarray:
    """The persona's person mask (uint8 alpha) placed as :func:`reference_frame` places the portrait."""
    return place_on_frame(np.asarray(persona.person_mask), width, height, np.uint8(0))


def place_on_frame(image: np.ndarray, width: int, height: int, fill: Any) -> np.ndarray:
    """``image`` (a canvas-sized persona array, ``[H, W]`` or ``[H, W, C]``) scaled and placed on a
    ``width`` x ``height`` frame filled with ``fill`` by :func:`~newsmotion_engine.render.placement.place_portrait`."""
    import cv2

    from newsmotion_engine.render.placement import place_portrait

    ox, oy, pw, ph = place_portrait(image.shape[:2], width, height)
    out = np.empty((height, width, *image.shape[2:]), image.dtype)
    out[:] = fill
    scaled = cv2.resize(image, (max(1, round(pw)), max(1, round(ph))), interpolation=cv2.INTER_AREA)
    x0, y0 = round(ox), round(oy)
    x1, y1 = min(width, x0 + scaled.shape[1]), min(height, y0 + scaled.shape[0])
    sx0, sy0 = max(0, -x0), max(0, -y0)
    out[max(0, y0):y1, max(0, x0):x1] = scaled[sy0 : sy0 + y1 - max(0, y0), sx0 : sx0 + x1 - max(0, x0)]
    return out


def save_arrays(tmp: Path, arrays: Mapping[str, Any]) -> None:
    """Write ``arrays`` (numpy arrays or CPU tensors, by file name) as ``.npy`` files into the
    temporary folder :func:`cachedir.write_cache` hands its build."""
    for name, value in arrays.items():
        np.save(tmp / name, np.ascontiguousarray(np.asarray(value)))


def check_shape(path: Path, array: np.ndarray, shape: tuple[int | None, ...]) -> None:
    """:class:`CacheCorruptError` unless ``array`` has ``shape`` (``None`` = any size)."""
    got = tuple(array.shape)
    if len(got) != len(shape) or any(s is not None and s != g for s, g in zip(shape, got)):
        raise CacheCorruptError(path, f"shape {list(got)}, expected {[s if s is not None else '*' for s in shape]}")


def as_tensor(array: np.ndarray):
    """A CPU tensor of a (memory-mapped, read-only) cache array: copied once into process memory,
    which the following ``.to(device)`` needs anyway."""
    import torch

    return torch.from_numpy(np.array(array, dtype=array.dtype, copy=True))
