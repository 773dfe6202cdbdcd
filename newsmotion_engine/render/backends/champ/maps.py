"""Champ's four guidance videos of one clip: depth, normal, semantic map (renders of the fitted
SMPL body) and the DWPose skeleton, in the order and encoding the official inference feeds them
(``guidance_types: depth, normal, semantic_map, dwpose``; each an RGB image on black, read
``/ 255`` into its guidance encoder).

The body: the loop's fitted joint rotations (:mod:`.fit`, the Tier-1 sub-cache) posed with the
user's SMPL model (mean shape), then placed per frame by a weak-perspective camera fitted in
closed form to the clip's *retargeted* keypoints, mapped where the persona's portrait sits on the
model's frame (:func:`~newsmotion_engine.render.placement.place_portrait`) — so the body follows
the persona's proportions and position, the rotations the loop's motion.

Encodings. Champ renders its maps with Blender from a ``.blend`` scene whose compositor and
materials we cannot read without Blender, so the encodings below are the standard ones, stated
here, not verified against that file:

- **semantic map**: each vertex coloured by its body part (the joint with its largest skinning
  weight) through OpenCV's viridis colormap at ``10 x part`` — exactly Champ's own
  ``SemanticRenderer`` (``scripts/data_processors/smpl/smpl_visualizer.py``) — interpolated
  over each triangle; the background black, as ``inference.py``'s ``process_semantic_map``
  masks it.
- **normal**: the smooth-shaded surface normal in camera space (x right, y up, z toward the
  viewer) as ``(n + 1) / 2`` RGB; background black.
- **depth**: grey, nearer is brighter: ``0.2 + 0.8 (z - z_min) / (z_max - z_min)`` with the
  range over the whole clip (so it does not flicker), background black.
- **dwpose**: the retargeted keypoints drawn in the DWPose style (:mod:`newsmotion_engine.guidance.draw`).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import cv2
import numpy as np

from newsmotion_engine.render.backends.champ.fit import HEAD_JOINT, JOINT_PAIRS, head_vertex, target_points, weak_perspective
from newsmotion_engine.render.backends.champ.raster import Fragments, interpolate, one_cpu_thread, rasterize, rasterize_frames, vertex_normals
from newsmotion_engine.render.backends.champ.smpl import SmplModel, pose_body
from newsmotion_engine.render.read_ahead import ordered_map

__all__ = ["GUIDANCE_TYPES", "ClipBody", "guidance_frames", "place_body", "semantic_colours"]

GUIDANCE_TYPES = ("depth", "normal", "semantic_map", "dwpose")  # configs/inference/inference.yaml's order
_DEPTH_FLOOR = 0.2


def semantic_colours(model: SmplModel) -> np.ndarray:
    """float32 ``[V, 3]`` RGB in 0..1: viridis at ``10 x part label`` (Champ's SemanticRenderer)."""
    bgr = cv2.applyColorMap((10 * model.part_labels()).astype(np.uint8)[:, None], cv2.COLORMAP_VIRIDIS)[:, 0]
    return (bgr[:, ::-1].astype(np.float32) / 255.0).copy()


@dataclass(frozen=True)
class ClipBody:
    """The clip's body in model-frame pixels: ``verts [T, V, 3]`` (x right, y down, z toward the
    camera), the clip's depth range, and each frame's camera scale."""

    verts: np.ndarray
    z_range: tuple[float, float]
    scale: np.ndarray


def place_body(model: SmplModel, pose: np.ndarray, keypoints: np.ndarray, box: tuple[float, float, float, float],
               conf_threshold: float = 0.3) -> ClipBody:  # fmt: skip
    """Pose the body and place each frame on the model's frame: ``keypoints [T, 133, 3]``
    normalized to the persona's portrait, which lies at ``box = (x, y, width, height)`` pixels."""
    import torch

    ox, oy, pw, ph = box
    verts, joints = pose_body(model, pose)
    kp = np.array(keypoints, np.float32, copy=True)
    kp[..., 0] = ox + kp[..., 0] * pw
    kp[..., 1] = oy + kp[..., 1] * ph
    targets, weights = target_points(kp, conf_threshold)
    idx = [j for j, _ in JOINT_PAIRS] + [HEAD_JOINT]
    points = np.concatenate([joints[:, idx], verts[:, [head_vertex(model)]]], 1)
    # A frame with too few points keeps the previous frame's camera (the first: the clip's mean).
    s, t = weak_perspective(torch.from_numpy(points), torch.from_numpy(weights), torch.from_numpy(targets))
    s, t = s.numpy(), t.numpy()
    good = (weights > 0).sum(1) >= 2
    if not good.any():
        raise ValueError("no frame of the clip has two confident body points to place the body on")
    s_fallback, t_fallback = float(np.median(s[good])), np.median(t[good], 0)
    for i in range(len(s)):
        if not good[i]:
            s[i], t[i] = (s[i - 1], t[i - 1]) if i else (s_fallback, t_fallback)
    px = np.empty_like(verts)
    px[..., 0] = verts[..., 0] * s[:, None] + t[:, None, 0]
    px[..., 1] = -verts[..., 1] * s[:, None] + t[:, None, 1]
    px[..., 2] = verts[..., 2] * s[:, None]
    return ClipBody(px, (float(px[..., 2].min()), float(px[..., 2].max())), s)


def _map_keypoints(keypoints: np.ndarray, box: tuple[float, float, float, float], width: int, height: int) -> np.ndarray:
    ox, oy, pw, ph = box
    kp = np.array(keypoints, np.float32, copy=True)
    kp[..., 0] = (ox + kp[..., 0] * pw) / width
    kp[..., 1] = (oy + kp[..., 1] * ph) / height
    return kp


def guidance_frames(model: SmplModel, pose: np.ndarray, keypoints: np.ndarray, box: tuple[float, float, float, float],
                    width: int, height: int, device: Any = None, workers: int | None = None) -> Iterator[dict[str, np.ndarray]]:  # fmt: skip
    """Per frame, ``{guidance type: uint8 [height, width, 3] RGB}`` for :data:`GUIDANCE_TYPES`;
    ``device``: where the rasterizer runs (a torch device; default the CPU, on one thread);
    ``workers``: frames drawn at once on worker threads (default: up to 8, one per core)."""
    import torch

    on_cpu = torch.device(device or "cpu").type == "cpu"
    with one_cpu_thread() if on_cpu else contextlib.nullcontext():
        yield from _frames(model, pose, keypoints, box, width, height, device, workers or max(1, min(8, os.cpu_count() or 1)))


def _frames(model: SmplModel, pose: np.ndarray, keypoints: np.ndarray, box: tuple[float, float, float, float],
            width: int, height: int, device: Any, workers: int) -> Iterator[dict[str, np.ndarray]]:  # fmt: skip
    from newsmotion_engine.guidance.draw import draw_pose

    body = place_body(model, pose, keypoints, box)
    colours = semantic_colours(model)
    z0, z1 = body.z_range
    zspan = max(z1 - z0, 1e-6)
    skeleton = _map_keypoints(keypoints, box, width, height)

    def frame(t: int, frags: Fragments | None = None) -> dict[str, np.ndarray]:
        v = body.verts[t]
        frags = rasterize(v, model.faces, width, height, device) if frags is None else frags
        m = frags.mask[..., None]
        depth = np.where(m, _DEPTH_FLOOR + (1 - _DEPTH_FLOOR) * (frags.depth[..., None] - z0) / zspan, 0.0)
        # Camera-space normals: image y points down, so flip it back to "up" before encoding.
        n = vertex_normals(v * np.array([1, -1, 1], np.float32), model.faces)
        normal = interpolate(frags, model.faces, n)
        normal /= np.maximum(np.linalg.norm(normal, axis=-1, keepdims=True), 1e-6)
        normal = np.where(m, (normal + 1) / 2, 0.0)
        semantic = interpolate(frags, model.faces, colours)
        return {
            "depth": _u8(np.repeat(depth, 3, -1)),
            "normal": _u8(normal),
            "semantic_map": _u8(semantic),
            "dwpose": draw_pose(skeleton[t], width, height),
        }

    # Frames are independent and NumPy / OpenCV / torch release the GIL in their large operations:
    # a few are drawn at once on worker threads, a bounded number ahead, handed out in order. On a
    # GPU the z-buffer runs here for several frames per pass (rasterize_frames: the same
    # fragments), fed to the workers as they go; on the CPU each worker rasterizes its own frame.
    if not rasterizes_in_chunks(device):
        yield from ordered_map(frame, range(body.verts.shape[0]), workers, name="champ-maps")
        return
    rasterized = enumerate(rasterize_frames(body.verts, model.faces, width, height, device, chunk=None))
    yield from ordered_map(lambda item: frame(*item), rasterized, workers, name="champ-maps")


def rasterizes_in_chunks(device: Any) -> bool:
    """Whether :func:`guidance_frames` runs the z-buffer several frames per pass (a GPU) rather
    than one frame per worker (the CPU)."""
    import torch

    return torch.device(device or "cpu").type != "cpu"


def _u8(x: np.ndarray) -> np.ndarray:
    return np.clip(np.rint(x * 255), 0, 255).astype(np.uint8)
