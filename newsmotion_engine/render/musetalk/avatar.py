"""The per-render parts MuseTalk needs, built once and kept as a sub-cache (MuseTalk's own
"avatar" preparation, the reference design's pre-vectorization): for every frame of a silent
render, the face box, the blend box, the two VAE latents of the 256x256 face crop and the blend
mask. Lip-syncing a speech onto the render then only runs the UNet, the VAE decoder and a paste.

Boxes follow the official preprocessing on the frame's 68 face landmarks (our skeleton's face
block is the same iBUG-68 layout DWPose gives): x from the leftmost to the rightmost point, y from
``nose - (chin - nose)`` (nose = point 29, chin = the lowest point) to the lowest point, plus
MuseTalk 1.5's ``extra_margin`` below. Latents: the crop with its lower half blacked out, and the
whole crop, each VAE-encoded (a sample of the latent distribution, seeded) and scaled: 8 channels
at 32x32. The blend box is the face box's centred square, 1.5x its larger side.

The blend mask is where the official code runs a BiSeNet face parser (``jaw`` mode) whose weights
we do not have: here the lower face is the polygon of the jawline (points 2..14) closed over the
nose, kept below the blend box's middle and blurred by a tenth of its size, as the official
mask is. ``mask_method`` in the cache's metadata says so.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from newsmotion_engine import cachedir
from newsmotion_engine.render.musetalk.config import MuseTalkOptions

__all__ = ["AVATAR_SCHEMA", "MASK_METHOD", "Avatar", "blend_box", "ensure_avatar", "face_box", "lower_face_mask", "prepare_avatar"]

MASK_SIZE = 256  # masks are kept at this size over the blend box and resized at paste time
MASK_METHOD = "jawline polygon from the face landmarks (the official BiSeNet face parser needs its weights)"
NO_FACE = -1

AVATAR_SCHEMA = cachedir.CacheSchema(
    kind="musetalk-avatar",
    version=1,
    arrays={
        "face_boxes.npy": cachedir.ArraySpec("int32", (None, 4)),
        "blend_boxes.npy": cachedir.ArraySpec("int32", (None, 4)),
        "latents.npy": cachedir.ArraySpec("float32", (None, 8, None, None)),
        "masks.npy": cachedir.ArraySpec("uint8", (None, MASK_SIZE, MASK_SIZE)),
    },
)


@dataclass(frozen=True)
class Avatar:
    """Per render frame: ``face_boxes`` / ``blend_boxes`` int32 ``[T, 4]`` (x1, y1, x2, y2;
    ``-1`` rows: no usable face, the frame stays as rendered), ``latents`` float32
    ``[T, 8, 32, 32]``, ``masks`` uint8 ``[T, 256, 256]`` over the blend box."""

    face_boxes: np.ndarray
    blend_boxes: np.ndarray
    latents: np.ndarray
    masks: np.ndarray

    def __len__(self) -> int:
        return len(self.face_boxes)


def face_box(face: np.ndarray, height: int, extra_margin: int) -> tuple[int, int, int, int] | None:
    """The official face box for 68 landmarks ``face`` (``[68, >=2]`` pixels), or ``None``."""
    pts = np.asarray(face, np.float64)[:, :2].astype(np.int32)
    nose_y = pts[29, 1]
    bottom = int(pts[:, 1].max())
    top = max(0, int(nose_y - (bottom - nose_y)))
    x1, x2 = int(pts[:, 0].min()), int(pts[:, 0].max())
    y2 = min(bottom + extra_margin, height)
    if y2 - top <= 0 or x2 - x1 <= 0 or x1 < 0:
        return None
    return x1, top, x2, y2


def blend_box(box: tuple[int, int, int, int], expand: float) -> tuple[int, int, int, int]:
    """The centred square around ``box``, ``expand`` times its larger side."""
    x1, y1, x2, y2 = box
    cx, cy = (x1 + x2) // 2, (y1 + y2) // 2
    s = int(max(x2 - x1, y2 - y1) // 2 * expand)
    return cx - s, cy - s, cx + s, cy + s


def lower_face_mask(face: np.ndarray, box: tuple[int, int, int, int], blend: tuple[int, int, int, int],
                    inference: dict[str, Any]) -> np.ndarray:  # fmt: skip
    """uint8 ``[256, 256]`` over ``blend``: the jaw polygon inside the face box, lower half only, blurred."""
    bx1, by1, bx2, by2 = blend
    side = bx2 - bx1
    pts = np.asarray(face, np.float64)[:, :2]
    polygon = np.concatenate([pts[2:15], pts[[35, 33, 31]]])  # jawline, then back over the nose
    local = (polygon - (bx1, by1)) * (MASK_SIZE / side)
    mask = np.zeros((MASK_SIZE, MASK_SIZE), np.uint8)
    cv2.fillPoly(mask, [np.round(local).astype(np.int32)], 255)
    x1, y1, x2, y2 = ((np.asarray(box, np.float64) - (bx1, by1, bx1, by1)) * (MASK_SIZE / side)).round().astype(int)
    keep = np.zeros_like(mask)
    keep[max(0, y1) : max(0, y2), max(0, x1) : max(0, x2)] = 1
    keep[: int(MASK_SIZE * inference["blend_upper_boundary_ratio"])] = 0
    mask *= keep
    k = int(inference["blend_blur_fraction"] * MASK_SIZE // 2 * 2) + 1
    return cv2.GaussianBlur(mask, (k, k), 0)


def _crop(frame: np.ndarray, box: tuple[int, int, int, int]) -> np.ndarray:
    x1, y1, x2, y2 = box
    return cv2.resize(frame[y1:y2, x1:x2], (256, 256), interpolation=cv2.INTER_LANCZOS4)


def _encode(crops: np.ndarray, components: Any, generator: Any) -> np.ndarray:
    """``[B, 256, 256, 3]`` uint8 -> ``[B, 8, 32, 32]``: (lower half black, whole) latents."""
    import torch

    x = torch.from_numpy(crops).permute(0, 3, 1, 2).float() / 255.0
    masked = x.clone()
    masked[:, :, x.shape[2] // 2 :] = 0
    out = []
    with torch.no_grad():
        for img in (masked, x):
            img = ((img - 0.5) / 0.5).to(components.device, components.dtype)
            dist = components.vae.encode(img).latent_dist
            noise = torch.randn(dist.mean.shape, generator=generator, dtype=torch.float32).to(dist.mean)
            out.append(((dist.mean + dist.std * noise) * components.scaling_factor).float().cpu())
    return torch.cat(out, dim=1).numpy()


def prepare_avatar(frames: np.ndarray, faces: np.ndarray, components: Any, opts: MuseTalkOptions, *,
                   progress: Callable[[int, int], None] | None = None) -> Avatar:  # fmt: skip
    """The avatar of rendered ``frames`` (uint8 ``[T, H, W, 3]``) with their 68 face landmarks
    ``faces`` (``[T, 68, >=2]`` pixels); ``progress(done, total)`` after each batch of faces encoded."""
    import torch

    frames = np.asarray(frames)
    T, H = len(frames), frames.shape[1]
    inf = components.inference
    face_boxes = np.full((T, 4), NO_FACE, np.int32)
    blend_boxes = np.full((T, 4), NO_FACE, np.int32)
    masks = np.zeros((T, MASK_SIZE, MASK_SIZE), np.uint8)
    latents = np.zeros((T, 8, 32, 32), np.float32)
    generator = torch.Generator().manual_seed(opts.seed)
    usable = []
    for t in range(T):
        box = face_box(faces[t], H, opts.extra_margin) if np.isfinite(faces[t]).all() else None
        if box is None:
            continue
        blend = blend_box(box, float(inf["blend_expand"]))
        face_boxes[t], blend_boxes[t] = box, blend
        masks[t] = lower_face_mask(faces[t], box, blend, inf)
        usable.append(t)
    for i in range(0, len(usable), opts.batch_size):
        idx = usable[i : i + opts.batch_size]
        latents[idx] = _encode(np.stack([_crop(frames[t], tuple(face_boxes[t])) for t in idx]), components, generator)
        if progress is not None:
            progress(i + len(idx), len(usable))
    return Avatar(face_boxes, blend_boxes, latents, masks)


def ensure_avatar(cache_dir: Path, frames: np.ndarray, faces: np.ndarray, components: Any, opts: MuseTalkOptions,
                  source: dict[str, Any], *, progress: Callable[[int, int], None] | None = None) -> Avatar:  # fmt: skip
    """The avatar sub-cache at ``cache_dir``: read when current for ``source`` (what the render
    was made from) and these settings, else built atomically (``progress`` as :func:`prepare_avatar`'s)."""
    params = {"extra_margin": opts.extra_margin, "seed": opts.seed, "weights": components.weights_label,
              "preset": opts.preset, "model_path": opts.model_path, "mask_method": MASK_METHOD}  # fmt: skip

    def read() -> Avatar:
        loaded = cachedir.read_cache(cache_dir, AVATAR_SCHEMA, expected_source=source, expected_params=params)
        a = loaded.arrays
        return Avatar(a["face_boxes.npy"], a["blend_boxes.npy"], a["latents.npy"], a["masks.npy"])

    def build() -> None:
        avatar = prepare_avatar(frames, faces, components, opts, progress=progress)

        def write(tmp: Path) -> None:
            for name in AVATAR_SCHEMA.arrays:
                np.save(tmp / name, getattr(avatar, name.removesuffix(".npy")))

        cachedir.write_cache(cache_dir, write, schema=AVATAR_SCHEMA, source=source, params=params,
                             extra={"mask_method": MASK_METHOD, "frames": len(avatar)})  # fmt: skip

    avatar, _ = cachedir.ensure(cache_dir, read, build)
    return avatar
