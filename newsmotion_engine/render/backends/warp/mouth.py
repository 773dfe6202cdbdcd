"""The warp backend's mouth: a viseme frame (open, wide, round) reshapes the persona's own mouth.

Everything happens on the body image in rest coordinates (the portrait as placed on the frame),
in one small patch around the mouth, before the frame's warp carries the face wherever the head
goes. The patch is resampled through a backward map built in the mouth's own frame (``u`` along
the line between the lip corners, ``v`` towards the chin, both in mouth widths):

- **jaw drop** (``open``): everything below the lip seam (the line between the inner lips) moves
  down; at the seam the drop has a lens profile (full in the middle, none at the corners), so the
  lips part like lips, and from the lower lip down to the chin it widens to the whole chin, which
  moves as a block and fades out below it;
- **upper lip** (``open``): lifts a little with the same lens profile, fading towards the nose;
- **spread / rounding** (``wide`` / ``round``): the mouth region is scaled along ``u`` about its
  centre (wider for spread lips, narrower for rounded ones), fading out beyond the corners;
- **interior**: the output pixels no source pixel lands on (the gap between the parted lips) are
  the mouth's inside, a dark shade of the persona's own lip colour, darkest in the middle, with
  the upper teeth as a light band under the upper lip (and the lower teeth for spread lips);
  the edges are anti-aliased by their sub-pixel distance to the lips.

A closed, neutral frame (all zeros) is the identity: the mouth stays exactly the persona's.
The geometry comes from the persona's 68 iBUG face landmarks (the persona cache stores them,
picked from mediapipe's face mesh); a portrait without a confident mouth gets no lips
(:func:`mouth_geometry` returns ``None`` and the render's telemetry says why).
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

from newsmotion_engine.skeleton import FACE_START

__all__ = ["MouthGeometry", "MouthShape", "mouth_geometry", "patch_box", "shape_mouth", "to_local"]

# iBUG-68 indices (offsets into the face block of the 133 keypoints).
_LEFT_CORNER, _RIGHT_CORNER = 48, 54  # outer lip corners (image left / image right)
_INNER_LEFT, _INNER_RIGHT = 60, 64
_SEAM_PAIRS = ((61, 67), (62, 66), (63, 65))  # upper inner lip point, the lower one below it
_CHIN, _SUBNASALE, _NOSE_TOP = 8, 33, 27
_MOUTH_POINTS = tuple(range(48, 68))

# Shape gains, in mouth widths at a full viseme value. A wide-open "aa" parts the inner lips by
# about a third of the mouth's width on a talking face; most of it is the jaw.
JAW_DROP = 0.24
UPPER_LIFT = 0.05
SPREAD = 0.14
ROUNDING = 0.22
_LOWER_LIP = 0.55  # below the seam, over this depth the lens-shaped drop widens to the whole chin
_TEETH = 0.085  # visible upper teeth height
_TEETH_HALF_WIDTH = 0.3
_COARSE_STEP = 0.04  # field nodes every 4% of the mouth's width (4 px on a 100 px mouth)


@dataclass(frozen=True)
class MouthShape:
    """One frame of mouth shape, each 0..1 (a :class:`~newsmotion_engine.speech.visemes.VisemeTrack`
    frame): ``open`` (jaw / lip aperture), ``wide`` (lip spread), ``round`` (lip rounding)."""

    open: float = 0.0
    wide: float = 0.0
    round: float = 0.0

    @property
    def neutral(self) -> bool:
        return self.open <= 1e-3 and self.wide <= 1e-3 and self.round <= 1e-3


@dataclass(frozen=True)
class MouthGeometry:
    """The persona's mouth in output pixels (rest pose) and the patch the shapes may touch."""

    centre: np.ndarray  # [2] px, the middle of the seam
    axis_u: np.ndarray  # [2] unit vector, image-left corner -> image-right corner
    axis_v: np.ndarray  # [2] unit vector, perpendicular, towards the chin
    width: float  # corner to corner, px
    jaw_scale: float  # what the jaw drop is measured in, px (the mouth's width, or more in profile)
    seam_u: np.ndarray  # seam points' u (ascending), mouth widths
    seam_v: np.ndarray  # their v
    chin_v: float  # the chin's v
    nose_v: float  # the subnasale's v (negative: above)
    box: tuple[int, int, int, int]  # x0, y0, x1, y1 of the patch, px
    grid_u: np.ndarray  # float32 [h, w] u of each patch pixel
    coarse_u: np.ndarray  # float32 [gh, gw] u of the coarse nodes the field is solved on
    coarse_v: np.ndarray  # float32 [gh, gw]
    basis: np.ndarray  # float32 [gh, gw, 3] the field per unit gain at the nodes (:func:`_basis`)
    uv_to_node: np.ndarray  # [2, 3] affine map (u, v, 1) -> node index coordinates (x, y)
    interior_rgb: np.ndarray  # float32 [3] the mouth's inside (a dark shade of the lips)
    teeth_rgb: np.ndarray  # float32 [3]
    shows_teeth: bool  # the portrait's lips are parted (a smile): its own teeth move with the lips


def patch_box(centre: np.ndarray, axis_u: np.ndarray, axis_v: np.ndarray, width: float, half_u: float,
              v_range: tuple[float, float], size: tuple[int, int], *, min_side: int) -> tuple[int, int, int, int] | None:  # fmt: skip
    """The pixel box ``(x0, y0, x1, y1)`` holding the local rectangle ``|u| <= half_u``, ``v`` in
    ``v_range`` (in ``width`` units along ``axis_u`` / ``axis_v`` from ``centre``), clipped to the
    frame ``size`` (w, h); ``None`` when less than ``min_side`` pixels of it are in the frame."""
    corners_uv = np.array([[-half_u, v_range[0]], [half_u, v_range[0]], [-half_u, v_range[1]], [half_u, v_range[1]]])
    corners = centre + width * (corners_uv[:, :1] * axis_u + corners_uv[:, 1:] * axis_v)
    x0, y0 = np.floor(corners.min(axis=0)).astype(int)
    x1, y1 = np.ceil(corners.max(axis=0)).astype(int) + 1
    x0, y0, x1, y1 = max(0, x0), max(0, y0), min(size[0], x1), min(size[1], y1)
    if x1 - x0 < min_side or y1 - y0 < min_side:
        return None
    return int(x0), int(y0), int(x1), int(y1)


def to_local(xs: np.ndarray, ys: np.ndarray, centre: np.ndarray, axis: np.ndarray, width: float) -> np.ndarray:
    """The coordinate of pixels ``(xs, ys)`` along ``axis`` from ``centre``, in ``width`` units."""
    return ((xs - centre[0]) * axis[0] + (ys - centre[1]) * axis[1]) / width


def mouth_geometry(rest_px: np.ndarray, rest_ok: np.ndarray, image: np.ndarray) -> MouthGeometry | None:
    """The mouth of a persona from its landmarks in output pixels (``rest_px`` ``[133, 2]``,
    ``rest_ok`` ``[133]``), ``None`` when the portrait shows no usable mouth (a lip landmark or
    the chin missing, or a mouth under 8 px wide). ``image``: the body image (uint8 RGB) the
    lips' colour is read from."""
    face = np.arange(FACE_START, FACE_START + 68)
    needed = list(_MOUTH_POINTS) + [_CHIN, _SUBNASALE, _NOSE_TOP]
    if not bool(np.all(rest_ok[face[needed]])):
        return None
    p = rest_px[face].astype(np.float64)
    left, right = p[_LEFT_CORNER], p[_RIGHT_CORNER]
    width = float(np.linalg.norm(right - left))
    if width < 8.0:
        return None
    axis_u = (right - left) / width
    axis_v = np.array([-axis_u[1], axis_u[0]])  # image y points down: (1, 0) -> (0, 1)
    seam = [p[_INNER_LEFT]] + [(p[a] + p[b]) / 2 for a, b in _SEAM_PAIRS] + [p[_INNER_RIGHT]]
    centre = (seam[2] + (left + right) / 2) / 2
    if float(np.dot(axis_v, p[_CHIN] - centre)) < 0:  # corners in the other order (a mirrored face)
        axis_u, axis_v = -axis_u, -axis_v
    local = lambda q: (np.asarray(q) - centre) @ np.stack([axis_u, axis_v], axis=1) / width  # noqa: E731
    seam_uv = local(np.array(seam))
    order = np.argsort(seam_uv[:, 0])
    chin_v = float(local(p[_CHIN])[1])
    nose_v = float(local(p[_SUBNASALE])[1])
    chin_v = max(chin_v, 0.45)  # a chin the mesh put on the lip would stop the jaw at the lip
    nose_v = min(nose_v, -0.15)

    # The patch: past the corners to the jaw, from the nose down to below the chin.
    H, W = image.shape[:2]
    box = patch_box(centre, axis_u, axis_v, width, 1.15, (nose_v - 0.05, chin_v + 0.6), (W, H), min_side=4)
    if box is None:
        return None
    x0, y0, x1, y1 = box
    to_u = lambda xs, ys: to_local(xs, ys, centre, axis_u, width)  # noqa: E731
    to_v = lambda xs, ys: to_local(xs, ys, centre, axis_v, width)  # noqa: E731
    ys, xs = np.mgrid[y0:y1, x0:x1].astype(np.float64)
    # The field is smooth on each side of the seam: it is solved on coarse nodes (one per
    # _COARSE_STEP mouth widths) placed at cv2.resize's pixel centres, so upsampling is exact
    # bilinear interpolation between nodes.
    pw, ph = x1 - x0, y1 - y0
    gw, gh = max(2, int(np.ceil(pw / max(1.0, _COARSE_STEP * width)))), max(2, int(np.ceil(ph / max(1.0, _COARSE_STEP * width))))
    gx = x0 + (np.arange(gw) + 0.5) * (pw / gw) - 0.5
    gy = y0 + (np.arange(gh) + 0.5) * (ph / gh) - 0.5
    cx, cy = np.meshgrid(gx, gy)
    coarse_u, coarse_v = to_u(cx, cy), to_v(cx, cy)
    # (u, v) -> pixel -> node index: x_px = centre + width (u axis_u + v axis_v), index = (px - g0) / spacing
    sx, sy = pw / gw, ph / gh
    uv_to_node = np.array([
        [width * axis_u[0] / sx, width * axis_v[0] / sx, (centre[0] - gx[0]) / sx],
        [width * axis_u[1] / sy, width * axis_v[1] / sy, (centre[1] - gy[0]) / sy],
    ])  # fmt: skip

    # The lips' own colour, from the pixels around the outer lip points.
    lip_pts = np.round(p[48:60]).astype(int)
    lip_pts[:, 0] = np.clip(lip_pts[:, 0], 0, W - 1)
    lip_pts[:, 1] = np.clip(lip_pts[:, 1], 0, H - 1)
    lip_rgb = np.median(image[lip_pts[:, 1], lip_pts[:, 0]].astype(np.float32), axis=0)
    rest_gap = float(np.mean([np.linalg.norm(p[a] - p[b]) for a, b in _SEAM_PAIRS])) / width
    return MouthGeometry(
        centre=centre,
        axis_u=axis_u,
        axis_v=axis_v,
        width=width,
        # A face seen from the side shows a narrow mouth but opens its jaw as far: the drop is
        # measured against the face's height too (between the eyes to the chin is about two mouth
        # widths on the frontal sample faces).
        jaw_scale=max(width, float(np.linalg.norm(p[_CHIN] - p[_NOSE_TOP])) / 2.0),
        seam_u=np.ascontiguousarray(seam_uv[order, 0]),
        seam_v=np.ascontiguousarray(seam_uv[order, 1]),
        chin_v=chin_v,
        nose_v=nose_v,
        box=box,
        grid_u=to_u(xs, ys).astype(np.float32),
        coarse_u=coarse_u.astype(np.float32),
        coarse_v=coarse_v.astype(np.float32),
        basis=_basis(coarse_u, coarse_v, seam_uv[order, 0], seam_uv[order, 1], chin_v, nose_v),
        uv_to_node=uv_to_node,
        interior_rgb=lip_rgb * np.float32(0.32),
        teeth_rgb=np.array([226.0, 222.0, 210.0], np.float32),
        shows_teeth=rest_gap > 0.05,
    )


def _smoothstep(e0: float, e1: float, x: np.ndarray) -> np.ndarray:
    t = np.clip((x - e0) / (e1 - e0), 0.0, 1.0)
    return t * t * (3.0 - 2.0 * t)


def _lens(u: np.ndarray) -> np.ndarray:
    """1 in the middle of the mouth, 0 at the corners (|u| = 0.5) and beyond, with no kink there
    (a raised cosine: a steep profile at the corner would drag the corner's crease into a bar)."""
    a = np.clip(np.abs(u) * 2.0, 0.0, 1.0)
    return (0.5 + 0.5 * np.cos(np.pi * a)) ** 0.6  # blunter than the cosine: a rounded opening


def _basis(u: np.ndarray, v: np.ndarray, seam_u: np.ndarray, seam_v: np.ndarray, chin_v: float, nose_v: float) -> np.ndarray:
    """The forward displacement per unit of each shape gain at source points ``(u, v)``, float32
    ``[..., 3]``: ``u`` shift per unit spread (SPREAD/ROUNDING scale), ``v`` shift per unit jaw
    drop (the rule below the seam) and per unit lip lift (the rule above it). The field of a frame
    is a linear mix of the three, so it is computed once per persona."""
    seam = np.interp(u, seam_u, seam_v)
    # Spread / rounding: fades out beyond the corners, towards the nose and below the lower lip.
    reach_up = max(0.12, -nose_v)
    vertical = np.where(v < seam, 1.0 - _smoothstep(0.1, reach_up, seam - v), 1.0 - _smoothstep(0.25, 0.7, v - seam))
    spread = u * (1.0 - _smoothstep(0.5, 1.05, np.abs(u))) * vertical
    # Jaw: the lens-shaped drop at the seam widens to the whole chin below, fading out under it.
    t = _smoothstep(0.0, _LOWER_LIP, v - seam)
    broad = 1.0 - _smoothstep(0.45, 1.05, np.abs(u))
    drop = (_lens(u) * (1.0 - t) + broad * t) * (1.0 - _smoothstep(chin_v, chin_v + 0.55, v))
    # Upper lip: lifts with the lens profile, fading out towards the nose.
    lift = -_lens(u) * (1.0 - _smoothstep(0.0, max(1e-3, -nose_v), seam - v))
    return np.stack([spread, drop, lift], axis=-1).astype(np.float32)


def _solve(g: MouthGeometry, shape: MouthShape, side: str) -> tuple[np.ndarray, np.ndarray]:
    """Source ``(u, v)`` of each coarse node for one side's rule: ``source + d(source) = node``,
    by fixed-point steps (the displacement is small and smooth; three steps are well under a
    hundredth of a pixel), sampling the basis bilinearly at each step's source."""
    scale = SPREAD * shape.wide - ROUNDING * shape.round
    k = 1 if side == "lower" else 2
    gain = (JAW_DROP if side == "lower" else UPPER_LIFT) * shape.open * g.jaw_scale / g.width
    m = g.uv_to_node
    u, v = g.coarse_u, g.coarse_v
    for _ in range(3):
        nx = (m[0, 0] * u + m[0, 1] * v + m[0, 2]).astype(np.float32)
        ny = (m[1, 0] * u + m[1, 1] * v + m[1, 2]).astype(np.float32)
        b = cv2.remap(g.basis, nx, ny, cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)
        u, v = g.coarse_u - np.float32(scale) * b[..., 0], g.coarse_v - np.float32(gain) * b[..., k]
    return u, v


def shape_mouth(source: np.ndarray, target: np.ndarray, g: MouthGeometry, shape: MouthShape) -> None:
    """Write the mouth patch of ``shape`` into ``target`` (uint8 RGB, same size as ``source``):
    ``source``'s mouth resampled through the shape's backward map, the inside drawn where the
    lips part. A neutral shape copies ``source``'s patch unchanged."""
    x0, y0, x1, y1 = g.box
    if shape.neutral:
        target[y0:y1, x0:x1] = source[y0:y1, x0:x1]
        return
    w = np.float32(g.width)
    ph, pw = y1 - y0, x1 - x0
    # Per side: where each output pixel samples (px) and how far inside the opening it lies (px),
    # solved on the coarse nodes and upsampled (each side's field is smooth).
    sides = []
    for side in ("upper", "lower"):
        su, sv = _solve(g, shape, side)
        seam = np.interp(su, g.seam_u, g.seam_v).astype(np.float32)
        inside = (sv - seam) if side == "upper" else (seam - sv)
        mx = np.float32(g.centre[0]) + w * (su * np.float32(g.axis_u[0]) + sv * np.float32(g.axis_v[0]))
        my = np.float32(g.centre[1]) + w * (su * np.float32(g.axis_u[1]) + sv * np.float32(g.axis_v[1]))
        coarse = cv2.merge([mx.astype(np.float32), my.astype(np.float32), (inside * w).astype(np.float32)])
        sides.append(cv2.resize(coarse, (pw, ph), interpolation=cv2.INTER_LINEAR))
    up, lo = sides
    inside_up, inside_lo = cv2.extractChannel(up, 2), cv2.extractChannel(lo, 2)
    # Each pixel takes the side it is nearer to (OpenCV's masked copy: several times numpy's where).
    cv2.copyTo(up, cv2.compare(inside_up, inside_lo, cv2.CMP_LE), lo)
    map_x, map_y = cv2.extractChannel(lo, 0), cv2.extractChannel(lo, 1)
    lips = cv2.remap(source, map_x, map_y, cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)

    # The opening: where both sides see the pixel inside; the rest of the patch is the lips' warp.
    nearer = cv2.min(inside_up, inside_lo)
    rows = np.flatnonzero(nearer.max(axis=1) > -0.5)
    if rows.size == 0:
        target[y0:y1, x0:x1] = lips
        return
    cols = np.flatnonzero(nearer[rows[0] : rows[-1] + 1].max(axis=0) > -0.5)
    r0, r1, c0, c1 = rows[0], rows[-1] + 1, cols[0], cols[-1] + 1
    inside_up, inside_lo = inside_up[r0:r1, c0:c1], inside_lo[r0:r1, c0:c1]
    depth = np.minimum(inside_up, inside_lo)
    gap = inside_up + inside_lo  # the opening's height in this column, px
    # Coverage: by the sub-pixel distance to the nearer lip, and no more than the opening's height
    # (where the lips just touch, beyond the corners, nothing of the inside shows).
    alpha = np.clip(depth + 0.5, 0.0, 1.0) * np.clip(gap, 0.0, 1.0)
    # The inside: dark, darkest just under the upper teeth, the tongue's lighter red towards the
    # lower lip.
    gap = np.maximum(gap, 1e-3)
    across = np.clip(inside_up / gap, 0.0, 1.0)
    shade = 0.6 + 1.1 * _smoothstep(0.45, 1.0, across) * np.clip(gap / (0.12 * w), 0.0, 1.0)
    inside = g.interior_rgb[None, None, :] * shade[..., None]
    # Teeth: the upper row under the upper lip (unless the portrait's own teeth already show and
    # move with the lip), the lower row over the lower lip for spread lips; narrower than the
    # mouth, shaded towards the sides.
    across_u = np.abs(g.grid_u[r0:r1, c0:c1]) / _TEETH_HALF_WIDTH
    teeth_span = np.sqrt(np.clip(1.0 - across_u**2, 0.0, 1.0))
    teeth = np.zeros_like(alpha)
    if not g.shows_teeth:
        teeth_h = np.minimum(_TEETH * w, 0.45 * gap) * teeth_span
        teeth = np.clip(teeth_h - inside_up + 0.5, 0.0, 1.0) * (inside_up > -0.5)
    if shape.wide > 0.2:
        low_h = np.minimum(0.6 * _TEETH * w * shape.wide, 0.3 * gap) * teeth_span
        teeth = np.maximum(teeth, np.clip(low_h - inside_lo + 0.5, 0.0, 1.0) * (inside_lo > -0.5))
    teeth *= np.clip(teeth_span * 2.5, 0.0, 1.0)
    teeth_col = g.teeth_rgb[None, None, :] * (0.72 + 0.28 * teeth_span)[..., None]
    inside = inside + (teeth_col - inside) * teeth[..., None]
    out = lips[r0:r1, c0:c1].astype(np.float32)
    out += (inside - out) * alpha[..., None]
    lips[r0:r1, c0:c1] = np.clip(out + 0.5, 0, 255).astype(np.uint8)
    target[y0:y1, x0:x1] = lips
