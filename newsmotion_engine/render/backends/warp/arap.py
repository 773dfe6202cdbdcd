"""As-rigid-as-possible (ARAP) deformation of a 2-D triangle mesh with soft handles.

A cut-out part (an arm of the portrait) is a triangle mesh at rest; per frame some vertices
(handles) are pulled to target positions and the rest follow so that every vertex's
neighbourhood stays as rigid as possible. This is the local/global scheme of O. Sorkine and
M. Alexa, "As-rigid-as-possible surface modeling" (SGP 2007), in 2-D (the shape-manipulation use
of T. Igarashi et al., SIGGRAPH 2005, and of Animated Drawings, Smith et al. 2023):

    E(x) = sum_i sum_{j in N(i)} |(x_i - x_j) - R_i (p_i - p_j)|^2
           + handle_weight * sum_h |x_h - c_h|^2 + prior_weight * sum_i |x_i - g_i|^2

``p`` rest positions, ``x`` deformed ones, ``R_i`` one rotation per vertex, ``c`` handle
targets, ``g`` a per-frame initial guess (e.g. linear blend skinning of the bones). The small
prior keeps a mesh piece without a handle well defined. With the handles fixed the global
step's matrix never changes, so it is factorized once (sparse LU, single-threaded: it does not
wake BLAS threads that would fight the renderer's) and each iteration is one local step (a
closed-form 2-D rotation per vertex) plus one back-substitution.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

__all__ = ["ArapMesh", "grid_mesh"]


def grid_mesh(mask: np.ndarray, cell: int, origin: tuple[float, float] = (0.0, 0.0)) -> tuple[np.ndarray, np.ndarray]:
    """A triangle mesh covering ``mask`` (bool ``[h, w]``): grid nodes every ``cell`` pixels,
    every grid square that touches the mask split into two triangles.

    Returns ``(vertices [V, 2] float64 (x, y) + origin, triangles [F, 3] int32)``, counter-clockwise
    in image coordinates (y down), unused nodes dropped.
    """
    h, w = mask.shape
    nx, ny = -(-w // cell), -(-h // cell)
    # A square is in when any mask pixel lies in it.
    padded = np.zeros((ny * cell, nx * cell), dtype=bool)
    padded[:h, :w] = mask
    cells = padded.reshape(ny, cell, nx, cell).any(axis=(1, 3))
    cy, cx = np.nonzero(cells)
    if cy.size == 0:
        return np.zeros((0, 2)), np.zeros((0, 3), dtype=np.int32)
    node = lambda i, j: j * (nx + 1) + i  # noqa: E731 - node index of grid corner (i, j)
    a, b = node(cx, cy), node(cx + 1, cy)
    c, d = node(cx + 1, cy + 1), node(cx, cy + 1)
    tris = np.concatenate([np.stack([a, d, b], 1), np.stack([b, d, c], 1)], axis=0)
    used, inverse = np.unique(tris, return_inverse=True)
    tris = inverse.reshape(tris.shape).astype(np.int32)
    verts = np.stack([used % (nx + 1), used // (nx + 1)], axis=1).astype(np.float64) * cell
    return verts + np.asarray(origin, dtype=np.float64), tris


class ArapMesh:
    """A rest mesh with a fixed handle set, prefactorized for :meth:`solve`.

    Args:
        rest: ``[V, 2]`` rest vertex positions.
        triangles: ``[F, 3]`` vertex indices.
        handles: ``[K]`` indices of the vertices that get targets each solve.
        handle_weight: how hard a handle pulls (relative to the uniform edge weight 1).
        prior_weight: pull towards the per-solve initial guess (tiny; regularizes free pieces).
    """

    def __init__(self, rest: np.ndarray, triangles: np.ndarray, handles: np.ndarray, *,
                 handle_weight: float = 50.0, prior_weight: float = 1e-3):  # fmt: skip
        self.rest = np.asarray(rest, dtype=np.float64)
        self.triangles = np.asarray(triangles, dtype=np.int32)
        self.handles = np.asarray(handles, dtype=np.int64)
        V = self.rest.shape[0]
        if V == 0 or self.triangles.size == 0:
            raise ValueError("an ARAP mesh needs at least one triangle")
        e = np.concatenate([self.triangles[:, [0, 1]], self.triangles[:, [1, 2]], self.triangles[:, [2, 0]]])
        e = np.unique(np.sort(e, axis=1), axis=0)
        # Directed edges both ways: i -> j with rest vector p_i - p_j.
        self._i = np.concatenate([e[:, 0], e[:, 1]])
        self._j = np.concatenate([e[:, 1], e[:, 0]])
        self._e = self.rest[self._i] - self.rest[self._j]
        self._V = V
        self.handle_weight = float(handle_weight)
        self.prior_weight = float(prior_weight)
        ones = np.ones(self._i.size)
        degree = np.bincount(self._i, minlength=V).astype(np.float64)
        lap = sp.coo_matrix((-ones, (self._i, self._j)), shape=(V, V)).tocsc()
        diag = degree + self.prior_weight
        diag[self.handles] += self.handle_weight
        system = (lap + sp.diags(diag)).tocsc()
        self._lu = spla.splu(system)

    @property
    def vertex_count(self) -> int:
        return self._V

    def solve(self, targets: np.ndarray, guess: np.ndarray, iterations: int = 3) -> np.ndarray:
        """Deformed vertices ``[V, 2]`` for handle ``targets`` ``[K, 2]``, starting from ``guess``
        ``[V, 2]`` (also the prior's anchor). Each iteration: best rotations per vertex for the
        current positions, then the positions for those rotations."""
        x = np.array(guess, dtype=np.float64, copy=True)
        fixed = self.prior_weight * x
        fixed[self.handles] += self.handle_weight * np.asarray(targets, dtype=np.float64)
        i, j, e = self._i, self._j, self._e
        V = self._V
        for _ in range(max(1, int(iterations))):
            d = x[i] - x[j]
            # 2-D Procrustes: the angle maximizing sum e . R d.
            dot = np.bincount(i, e[:, 0] * d[:, 0] + e[:, 1] * d[:, 1], minlength=V)
            crs = np.bincount(i, e[:, 0] * d[:, 1] - e[:, 1] * d[:, 0], minlength=V)
            ang = np.arctan2(crs, dot)
            c, s = np.cos(ang), np.sin(ang)
            # Rotate each rest edge by the mean rotation of its two ends: (R_i + R_j) e / 2.
            cc = 0.5 * (c[i] + c[j])
            ss = 0.5 * (s[i] + s[j])
            rx = cc * e[:, 0] - ss * e[:, 1]
            ry = ss * e[:, 0] + cc * e[:, 1]
            rhs = np.stack([np.bincount(i, rx, minlength=V), np.bincount(i, ry, minlength=V)], axis=1)
            rhs += fixed
            x = self._lu.solve(rhs)
        return x
