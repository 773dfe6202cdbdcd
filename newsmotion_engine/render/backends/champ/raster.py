"""A small z-buffer triangle rasterizer (numpy) for the SMPL guidance maps.

:func:`rasterize` projects nothing itself: it takes vertices already in pixel coordinates (x right,
y down, z growing toward the camera) and returns, per pixel, the nearest triangle and the
barycentric weights of its three corners at the pixel centre. The maps are then interpolations
of per-vertex values (:func:`interpolate`), as a GPU rasterizer with smooth shading would give.

How: every triangle's bounding box is visited as a square grid of pixel centres; triangles are
grouped by box size (powers of two), so a mesh of small triangles costs a few pixels each and a
large one is visited in a single bigger group. Inside-tests use the three edge functions with
a small tolerance (shared edges leave no cracks); the depth test keeps the largest z per pixel
(a stable sort, so equal depths resolve to the lower triangle index).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Fragments", "interpolate", "rasterize", "vertex_normals"]

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


def rasterize(verts: np.ndarray, faces: np.ndarray, width: int, height: int) -> Fragments:
    """Rasterize triangles ``faces [F, 3]`` of ``verts [V, 3]`` (pixels, z toward the camera) into
    a ``width`` x ``height`` image; see the module docstring."""
    verts = np.asarray(verts, np.float64)
    tri = verts[np.asarray(faces)]  # [F, 3, 3]
    x, y, z = tri[..., 0], tri[..., 1], tri[..., 2]
    # Pixel centres (i + 0.5) inside the box: columns ceil(min - 0.5) .. floor(max - 0.5).
    x0 = np.clip(np.ceil(x.min(1) - 0.5), 0, width).astype(np.int64)
    x1 = np.clip(np.floor(x.max(1) - 0.5), -1, width - 1).astype(np.int64)
    y0 = np.clip(np.ceil(y.min(1) - 0.5), 0, height).astype(np.int64)
    y1 = np.clip(np.floor(y.max(1) - 0.5), -1, height - 1).astype(np.int64)
    area = (x[:, 1] - x[:, 0]) * (y[:, 2] - y[:, 0]) - (x[:, 2] - x[:, 0]) * (y[:, 1] - y[:, 0])
    ok = (x1 >= x0) & (y1 >= y0) & (np.abs(area) > 1e-12)
    span = np.maximum(x1 - x0, y1 - y0) + 1
    pix_all, z_all, f_all, b_all = [], [], [], []
    size = 1
    remaining = ok.copy()
    while remaining.any():
        group = np.flatnonzero(remaining & (span <= size))
        remaining[group] = False
        if group.size:
            d = np.arange(size)
            gx = x0[group, None, None] + d[None, None, :]  # [G, 1, S]
            gy = y0[group, None, None] + d[None, :, None]  # [G, S, 1]
            px, py = gx + 0.5, gy + 0.5
            xg, yg, a = x[group], y[group], area[group]
            # Barycentrics from the edge functions, normalised by the signed doubled area.
            l0 = ((xg[:, 1, None, None] - px) * (yg[:, 2, None, None] - py) - (xg[:, 2, None, None] - px) * (yg[:, 1, None, None] - py)) / a[:, None, None]
            l1 = ((xg[:, 2, None, None] - px) * (yg[:, 0, None, None] - py) - (xg[:, 0, None, None] - px) * (yg[:, 2, None, None] - py)) / a[:, None, None]
            l2 = 1.0 - l0 - l1
            inside = (l0 >= _EPS) & (l1 >= _EPS) & (l2 >= _EPS)
            inside &= (gx <= x1[group, None, None]) & (gy <= y1[group, None, None])
            g, iy, ix = np.nonzero(inside)
            if g.size:
                bx, by = gx[g, 0, ix], gy[g, iy, 0]
                lam = np.stack([l0[g, iy, ix], l1[g, iy, ix], l2[g, iy, ix]], -1)
                pix_all.append(by * width + bx)
                z_all.append((lam * z[group[g]]).sum(-1))
                f_all.append(group[g])
                b_all.append(lam)
        size *= 2
    face = np.full(height * width, -1, np.int64)
    bary = np.zeros((height * width, 3), np.float32)
    depth = np.zeros(height * width, np.float32)
    if pix_all:
        pix, zz, ff, bb = (np.concatenate(a) for a in (pix_all, z_all, f_all, b_all))
        order = np.lexsort((ff, -zz, pix))  # per pixel: nearest first, then the lower face index
        pix, zz, ff, bb = pix[order], zz[order], ff[order], bb[order]
        first = np.flatnonzero(np.r_[True, pix[1:] != pix[:-1]])
        face[pix[first]] = ff[first]
        bary[pix[first]] = np.clip(bb[first], 0.0, 1.0)
        depth[pix[first]] = zz[first]
    return Fragments(face.reshape(height, width), bary.reshape(height, width, 3), depth.reshape(height, width))


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
