"""A small z-buffer triangle rasterizer (numpy) for the SMPL guidance maps.

:func:`rasterize` projects nothing itself: it takes vertices already in pixel coordinates (x right,
y down, z growing toward the camera) and returns, per pixel, the nearest triangle and the
barycentric weights of its three corners at the pixel centre. The maps are then interpolations
of per-vertex values (:func:`interpolate`), as a GPU rasterizer with smooth shading would give.

How (torch, on the CPU or a GPU): every triangle's bounding box is visited as a grid of pixel
centres; triangles are grouped by box width and height rounded up to powers of two, so a mesh of
small triangles costs a few pixels each and a large one is visited in a bigger group. Inside-tests
use the three edge functions (linear in the pixel centre) with a small tolerance, so shared edges
leave no cracks; the depth test keeps the largest z per pixel, equal depths resolving to the lower
triangle index.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["Fragments", "interpolate", "one_cpu_thread", "frames_per_chunk", "rasterize", "rasterize_frames", "vertex_normals"]

_EPS = -1e-6  # edge-function tolerance (relative to the doubled triangle area)


@dataclass(frozen=True)
class Fragments:
    """Per pixel: ``face`` int64 ``[H, W]`` (-1 = background), ``bary`` float32 ``[H, W, 3]``,
    ``depth`` float32 ``[H, W]`` (the interpolated z; 0 on background)."""

    face: np.ndarray
    bary: np.ndarray
    depth: np.ndarray

    @property
    def mask(self) -> np.ndarray:
        return self.face >= 0


@contextlib.contextmanager
def one_cpu_thread() -> Iterator[None]:
    """Run torch on one CPU thread inside (restored after): the rasterizer and the SMPL fit run many
    ops on small tensors, where extra threads cost more in hand-offs than they save (many times
    slower on a busy 2-core machine)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _pow2(n):
    """The smallest power of two >= ``n`` (a tensor of positive ints)."""
    import torch

    return torch.pow(2, torch.ceil(torch.log2(n.double())).long()).clamp_min(1)


def rasterize(verts: np.ndarray, faces: np.ndarray, width: int, height: int, device: Any = None) -> Fragments:
    """Rasterize triangles ``faces [F, 3]`` of ``verts [V, 3]`` (pixels, z toward the camera) into
    a ``width`` x ``height`` image; see the module docstring. ``device``: a torch device to work on
    (default the CPU; a GPU takes a 13,800-triangle body in milliseconds)."""
    return next(rasterize_frames(np.asarray(verts)[None], faces, width, height, device, chunk=1))


# Candidate pixels (box pixels of every triangle) per chunk of rasterize_frames(chunk=None): about
# 24 bytes each in flight, so ~0.8 GB on the device.
CHUNK_CANDIDATES = 32_000_000


def frames_per_chunk(verts: np.ndarray, faces: np.ndarray, candidates: int = CHUNK_CANDIDATES) -> int:
    """How many frames of ``verts [T, V, 3]`` fit :data:`CHUNK_CANDIDATES` candidate pixels, from
    the first frame's triangle boxes (power-of-two sides, as the rasterizer visits them), 1..T."""
    tri = np.asarray(verts[0])[np.asarray(faces)]
    w = np.ceil(tri[..., 0].max(1) - tri[..., 0].min(1)) + 1
    h = np.ceil(tri[..., 1].max(1) - tri[..., 1].min(1)) + 1
    per_frame = float((2.0 ** np.ceil(np.log2(np.maximum(w, 1))) * 2.0 ** np.ceil(np.log2(np.maximum(h, 1)))).sum())
    return int(np.clip(candidates // max(per_frame, 1.0), 1, len(verts)))


def rasterize_frames(verts: np.ndarray, faces: np.ndarray, width: int, height: int, device: Any = None,
                     chunk: int | None = 1) -> Iterator[Fragments]:  # fmt: skip
    """:func:`rasterize` of each frame of ``verts [T, V, 3]``, ``chunk`` frames in one pass (None:
    :func:`frames_per_chunk`). The chunk's triangles are grouped together: the same per-triangle
    and per-pixel arithmetic, so the same fragments, in a few dozen tensor operations per chunk
    instead of per frame. On a GPU a frame's cost is those launches and the host round trip, not
    its pixels; on the CPU larger groups are slower, so the CPU path draws frame by frame."""
    import torch

    chunk = frames_per_chunk(verts, faces) if chunk is None else chunk
    dev = torch.device(device or "cpu")
    fdt = torch.float64 if dev.type == "cpu" else torch.float32
    f_idx = torch.as_tensor(np.asarray(faces), device=dev, dtype=torch.long)
    for c0 in range(0, len(verts), max(1, chunk)):
        v = torch.as_tensor(np.asarray(verts[c0 : c0 + max(1, chunk)]), device=dev).to(fdt)
        face, bary, depth = _rasterize_batch(v, f_idx, width, height, fdt)
        face, bary, depth = face.cpu().numpy(), bary.float().cpu().numpy(), depth.float().cpu().numpy()
        for t in range(v.shape[0]):
            yield Fragments(face[t], bary[t], depth[t])


def _rasterize_batch(v: Any, faces: Any, width: int, height: int, fdt: Any) -> tuple[Any, Any, Any]:
    """The z-buffer over ``v [T, V, 3]`` -> ``face [T, H, W]`` (per-frame triangle index), ``bary
    [T, H, W, 3]``, ``depth [T, H, W]`` tensors on ``v``'s device. A triangle is (frame, face):
    pixel indices carry the frame, so candidates of different frames never meet."""
    import torch

    dev = v.device
    T, F = v.shape[0], faces.shape[0]
    tri = v[:, faces].reshape(T * F, 3, 3)  # [T*F, 3, 3]
    frame = torch.arange(T, device=dev).repeat_interleave(F)
    x, y, z = tri[..., 0], tri[..., 1], tri[..., 2]
    # Pixel centres (i + 0.5) inside the box: columns ceil(min - 0.5) .. floor(max - 0.5).
    x0 = torch.ceil(x.min(1).values - 0.5).clamp(0, width).long()
    x1 = torch.floor(x.max(1).values - 0.5).clamp(-1, width - 1).long()
    y0 = torch.ceil(y.min(1).values - 0.5).clamp(0, height).long()
    y1 = torch.floor(y.max(1).values - 0.5).clamp(-1, height - 1).long()
    area = (x[:, 1] - x[:, 0]) * (y[:, 2] - y[:, 0]) - (x[:, 2] - x[:, 0]) * (y[:, 1] - y[:, 0])
    ok = (x1 >= x0) & (y1 >= y0) & (area.abs() > 1e-12)
    # Barycentric i as a linear function of the pixel centre: a_i px + b_i py + c_i (edge j -> k).
    safe = torch.where(ok, area, torch.ones_like(area))
    coef = []
    for j, k in ((1, 2), (2, 0), (0, 1)):
        coef.append(((y[:, j] - y[:, k]) / safe, (x[:, k] - x[:, j]) / safe, (x[:, j] * y[:, k] - x[:, k] * y[:, j]) / safe))
    bw, bh = _pow2((x1 - x0 + 1).clamp_min(1)), _pow2((y1 - y0 + 1).clamp_min(1))
    keys = bw * (2 * (height + width)) + bh
    pix_all, z_all, f_all, b_all = [], [], [], []
    for key in torch.unique(keys[ok]).tolist():
        g = torch.nonzero(ok & (keys == key))[:, 0]
        kw, kh = int(bw[g[0]]), int(bh[g[0]])
        dx = torch.arange(kw, device=dev)[None, None, :]
        dy = torch.arange(kh, device=dev)[None, :, None]
        px = (x0[g, None, None] + dx).to(fdt) + 0.5
        py = (y0[g, None, None] + dy).to(fdt) + 0.5
        lam = [a[g, None, None] * px + b[g, None, None] * py + c[g, None, None] for a, b, c in coef[:2]]
        lam.append(1.0 - lam[0] - lam[1])
        inside = (lam[0] >= _EPS) & (lam[1] >= _EPS) & (lam[2] >= _EPS)
        inside &= (dx <= (x1 - x0)[g, None, None]) & (dy <= (y1 - y0)[g, None, None])
        i, iy, ix = torch.nonzero(inside, as_tuple=True)
        if i.numel():
            gi = g[i]
            l3 = torch.stack([lam[0][i, iy, ix], lam[1][i, iy, ix], lam[2][i, iy, ix]], -1)
            pix_all.append(frame[gi] * (height * width) + (y0[gi] + iy) * width + (x0[gi] + ix))
            z_all.append((l3 * z[gi]).sum(-1))
            f_all.append(gi)
            b_all.append(l3)
    n = T * height * width
    face = torch.full((n,), -1, dtype=torch.long, device=dev)
    bary = torch.zeros((n, 3), dtype=fdt, device=dev)
    depth = torch.zeros(n, dtype=fdt, device=dev)
    if pix_all:
        pix, zz, ff, bb = (torch.cat(a) for a in (pix_all, z_all, f_all, b_all))
        # Per pixel the nearest candidate; among equally near ones the lowest triangle index (one
        # frame's triangles share a pixel, so the (frame, face) order is the face order).
        zbuf = torch.full((n,), -torch.inf, dtype=fdt, device=dev).scatter_reduce(0, pix, zz, reduce="amax")
        near = zz >= zbuf[pix]
        fbuf = torch.full((n,), torch.iinfo(torch.long).max, device=dev).scatter_reduce(0, pix[near], ff[near], reduce="amin")
        win = near & (ff == fbuf[pix])
        face[pix[win]], bary[pix[win]], depth[pix[win]] = ff[win] % F, bb[win].clamp(0.0, 1.0), zz[win]
    return face.reshape(T, height, width), bary.reshape(T, height, width, 3), depth.reshape(T, height, width)


def interpolate(frags: Fragments, faces: np.ndarray, values: np.ndarray, background: float = 0.0) -> np.ndarray:
    """Per-pixel interpolation of per-vertex ``values [V, C]`` -> float32 ``[H, W, C]``."""
    out = np.full((*frags.face.shape, values.shape[1]), background, np.float32)
    m = frags.mask
    corners = values[np.asarray(faces)[frags.face[m]]]  # [N, 3, C]
    out[m] = (frags.bary[m][..., None] * corners).sum(1)
    return out


def vertex_normals(verts: np.ndarray, faces: np.ndarray) -> np.ndarray:
    """Unit vertex normals ``[V, 3]``: the area-weighted sum of the adjacent faces' normals
    (counter-clockwise faces seen from outside point out)."""
    tri = verts[faces]
    fn = np.cross(tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0])
    vn = np.zeros_like(verts, dtype=np.float64)
    for k in range(3):
        np.add.at(vn, faces[:, k], fn)
    return (vn / np.maximum(np.linalg.norm(vn, axis=1, keepdims=True), 1e-12)).astype(np.float32)
