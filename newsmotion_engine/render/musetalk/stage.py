"""The MuseTalk lip-sync stage: a silent render plus a speech in, the same frames with the lower
face redrawn from the speech out. Any backend's render can pass through it (it only reads frames
and their face landmarks).

Per output frame (one per video frame of the speech): the avatar frame it lands on (the render
played forward then backward, as the official inference cycles a video shorter than the audio),
its 8-channel latent and the frame's 50 audio tokens (+ the sinusoidal table) go through the UNet
once at timestep 0 (MuseTalk is single-step inpainting); the predicted latent is decoded to a
256x256 face, resized into the face box and blended into the frame with the avatar's mask.
Frames without a usable face pass through unchanged.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import cv2
import numpy as np

from newsmotion_engine.render.musetalk.avatar import Avatar
from newsmotion_engine.render.musetalk.components import positional_encoding

__all__ = ["StageStats", "avatar_index", "lip_sync_frames", "paste_face"]


@dataclass
class StageStats:
    """What one pass did: frames out, frames redrawn, UNet calls, seconds in the models (UNet +
    decode, synchronized) and in the pastes."""

    frames: int = 0
    redrawn: int = 0
    unet_calls: int = 0
    model_s: float = 0.0
    paste_s: float = 0.0

    @property
    def fps(self) -> float:
        """Frames per second of the stage itself (models + pastes)."""
        busy = self.model_s + self.paste_s
        return self.frames / busy if busy > 0 else 0.0


def avatar_index(i: int, n: int) -> int:
    """Output frame ``i`` on an ``n``-frame render played forward, then backward, repeated."""
    if n <= 1:
        return 0
    period = 2 * n
    k = i % period
    return k if k < n else period - 1 - k


def paste_face(frame: np.ndarray, face: np.ndarray, box: np.ndarray, blend: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """``frame`` with the 256x256 ``face`` resized into ``box`` and blended in over ``blend`` by ``mask``."""
    out = frame.copy()
    x1, y1, x2, y2 = (int(v) for v in box)
    bx1, by1, bx2, by2 = (int(v) for v in blend)
    H, W = frame.shape[:2]
    side = bx2 - bx1
    patched = frame.copy()
    patched[y1:y2, x1:x2] = cv2.resize(face, (x2 - x1, y2 - y1))
    alpha = cv2.resize(mask, (side, side)).astype(np.float32)[..., None] / 255.0
    cx1, cy1, cx2, cy2 = max(bx1, 0), max(by1, 0), min(bx2, W), min(by2, H)  # the blend box, clipped to the frame
    a = alpha[cy1 - by1 : cy2 - by1, cx1 - bx1 : cx2 - bx1]
    region = out[cy1:cy2, cx1:cx2].astype(np.float32)
    mixed = a * patched[cy1:cy2, cx1:cx2].astype(np.float32) + (1 - a) * region
    out[cy1:cy2, cx1:cx2] = np.clip(np.rint(mixed), 0, 255).astype(np.uint8)
    return out


def _faces(latents: np.ndarray, tokens: np.ndarray, components: Any, table: Any) -> np.ndarray:
    """One UNet step + VAE decode: ``[B, 8, 32, 32]``, ``[B, 50, 384]`` -> uint8 ``[B, 256, 256, 3]``."""
    import torch

    dev, dtype = components.device, components.dtype
    with torch.no_grad():
        audio = (torch.from_numpy(tokens) + table).to(dev, dtype)
        t = torch.tensor([int(components.inference["timestep"])], device=dev)
        pred = components.unet(torch.from_numpy(latents).to(dev, dtype), t, encoder_hidden_states=audio).sample
        image = components.vae.decode(pred / components.scaling_factor).sample
        image = (image.float() / 2 + 0.5).clamp(0, 1)
        return (image.permute(0, 2, 3, 1) * 255).round().to(torch.uint8).cpu().numpy()


def lip_sync_frames(frames: np.ndarray, avatar: Avatar, tokens: np.ndarray, components: Any, *, batch_size: int = 8,
                    stats: StageStats | None = None, progress: Callable[[int], None] | None = None) -> Iterator[np.ndarray]:  # fmt: skip
    """Yield one frame per row of ``tokens`` (``[T_video, 50, 384]``, :func:`.audio.audio_tokens`):
    ``frames`` (the silent render, ``[N, H, W, 3]`` uint8, ``N == len(avatar)``) lip-synced."""
    if len(frames) != len(avatar):
        raise ValueError(f"lip_sync_frames: {len(frames)} frames but an avatar of {len(avatar)}")
    stats = stats if stats is not None else StageStats()
    table = positional_encoding(tokens.shape[1], tokens.shape[2])
    n = len(frames)
    for start in range(0, len(tokens), batch_size):
        rows = range(start, min(start + batch_size, len(tokens)))
        index = [avatar_index(i, n) for i in rows]
        drawn = [j for j in index if avatar.face_boxes[j, 0] >= 0]
        faces: dict[int, np.ndarray] = {}
        if drawn:
            pick = [k for k, j in enumerate(index) if avatar.face_boxes[j, 0] >= 0]
            t0 = time.perf_counter()
            out = _faces(np.asarray(avatar.latents[drawn]), np.ascontiguousarray(tokens[[start + k for k in pick]]), components, table)
            stats.model_s += time.perf_counter() - t0
            stats.unet_calls += 1
            faces = {k: out[m] for m, k in enumerate(pick)}
        for k, j in enumerate(index):
            frame = np.asarray(frames[j])
            if k in faces:
                t0 = time.perf_counter()
                frame = paste_face(frame, faces[k], avatar.face_boxes[j], avatar.blend_boxes[j], avatar.masks[j])
                stats.paste_s += time.perf_counter() - t0
                stats.redrawn += 1
            stats.frames += 1
            yield frame
        if progress is not None:
            progress(len(index))
