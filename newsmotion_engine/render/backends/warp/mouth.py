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

__all__ = ["MouthGeometry", "MouthShape", "mouth_geometry", "shape_mouth"]

# iBUG-68 indices (offsets into the face block of the 133 keypoints).
_LEFT_CORNER, _RIGHT_CORNER = 48, 54  # outer lip corners (image left / image right)
_INNER_LEFT, _INNER_RIGHT = 60, 64
_SEAM_PAIRS = ((61, 67), (62, 66), (63, 65))  # upper inner lip point, the lower one below it
_CHIN, _SUBNASALE = 8, 33
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
    seam_u: np.ndarray  # seam points' u (ascending), mouth widths
    seam_v: np.ndarray  # their v
    chin_v: float  # the chin's v
    nose_v: float  # the subnasale's v (negative: above)
    box: tuple[int, int, int, int]  # x0, y0, x1, y1 of the patch, px
    grid_u: np.ndarray  # float32 [h, w] u of each patch pixel
    grid_v: np.ndarray  # float32 [h, w] v of each patch pixel
    interior_rgb: np.ndarray  # float32 [3] the mouth's inside (a dark shade of the lips)
    teeth_rgb: np.ndarray  # float32 [3]
    shows_teeth: bool  # the portrait's lips are parted (a smile): its own teeth move with the lips


def mouth_geometry(rest_px: np.ndarray, rest_ok: np.ndarray, image: np.ndarray) -> MouthGeometry | None:
    """The mouth of a persona from its landmarks in output pixels (``rest_px`` ``[133, 2]``,
    ``rest_ok`` ``[133]``), ``None`` when the portrait shows no usable mouth (a lip landmark or
    the chin missing, or a mouth under 8 px wide). ``image``: the body image (uint8 RGB) the
    lips' colour is read from."""
    face = np.arange(FACE_START, FACE_START + 68)
    needed = list(_MOUTH_POINTS) + [_CHIN, _SUBNASALE]
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

    # The patch: past the corners to the jaw, from the nose down to below the chin (rotated box).
    corners_uv = np.array([[-1.15, nose_v - 0.05], [1.15, nose_v - 0.05], [-1.15, chin_v + 0.6], [1.15, chin_v + 0.6]])
    corners_px = centre + width * (corners_uv[:, :1] * axis_u + corners_uv[:, 1:] * axis_v)
    H, W = image.shape[:2]
    x0, y0 = np.floor(corners_px.min(axis=0)).astype(int)
    x1, y1 = np.ceil(corners_px.max(axis=0)).astype(int) + 1
    x0, y0, x1, y1 = max(0, x0), max(0, y0), min(W, x1), min(H, y1)
    if x1 - x0 < 4 or y1 - y0 < 4:
        return None
    ys, xs = np.mgrid[y0:y1, x0:x1].astype(np.float32)
    dx, dy = xs - np.float32(centre[0]), ys - np.float32(centre[1])
    grid_u = (dx * np.float32(axis_u[0]) + dy * np.float32(axis_u[1])) / np.float32(width)
    grid_v = (dx * np.float32(axis_v[0]) + dy * np.float32(axis_v[1])) / np.float32(width)

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
        seam_u=np.ascontiguousarray(seam_uv[order, 0]),
        seam_v=np.ascontiguousarray(seam_uv[order, 1]),
        chin_v=chin_v,
        nose_v=nose_v,
        box=(int(x0), int(y0), int(x1), int(y1)),
        grid_u=grid_u,
        grid_v=grid_v,
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


class _Field:
    """The forward displacement of one frame's shape, in mouth widths, for source points."""

    def __init__(self, g: MouthGeometry, shape: MouthShape):
        self.g = g
        self.drop = JAW_DROP * shape.open
        self.lift = UPPER_LIFT * shape.open
        self.scale = SPREAD * shape.wide - ROUNDING * shape.round

    def seam(self, u: np.ndarray) -> np.ndarray:
        return np.interp(u, self.g.seam_u, self.g.seam_v).astype(np.float32)

    def horizontal(self, u: np.ndarray, v: np.ndarray, seam: np.ndarray) -> np.ndarray:
        # Fades out beyond the corners, towards the nose and below the lower lip, inside the patch.
        reach_up = max(0.12, float(-self.g.nose_v))
        vertical = np.where(v < seam, 1.0 - _smoothstep(0.1, reach_up, seam - v), 1.0 - _smoothstep(0.25, 0.7, v - seam))
        window = (1.0 - _smoothstep(0.5, 1.05, np.abs(u))) * vertical
        return u * (self.scale * window)

    def lower(self, u: np.ndarray, v: np.ndarray, seam: np.ndarray) -> np.ndarray:
        t = _smoothstep(0.0, _LOWER_LIP, v - seam)
        broad = 1.0 - _smoothstep(0.45, 1.05, np.abs(u))
        profile = _lens(u) * (1.0 - t) + broad * t
        fade = 1.0 - _smoothstep(self.g.chin_v, self.g.chin_v + 0.55, v)
        return self.drop * profile * fade

    def upper(self, u: np.ndarray, v: np.ndarray, seam: np.ndarray) -> np.ndarray:
        reach = max(1e-3, float(-self.g.nose_v))
        fade = 1.0 - _smoothstep(0.0, reach, seam - v)
        return -self.lift * _lens(u) * fade

    def solve(self, u_out: np.ndarray, v_out: np.ndarray, side: str) -> tuple[np.ndarray, np.ndarray]:
        """Source ``(u, v)`` with ``source + d(source) = output`` for one side's rule (fixed point;
        the displacement is small and smooth, three steps are below a hundredth of a pixel)."""
        u, v = u_out, v_out
        vertical = self.upper if side == "upper" else self.lower
        for _ in range(3):
            seam = self.seam(u)
            u_next = u_out - self.horizontal(u, v, seam)
            v = v_out - vertical(u, v, seam)
            u = u_next
        return u, v


def shape_mouth(source: np.ndarray, target: np.ndarray, g: MouthGeometry, shape: MouthShape) -> None:
    """Write the mouth patch of ``shape`` into ``target`` (uint8 RGB, same size as ``source``):
    ``source``'s mouth resampled through the shape's backward map, the inside drawn where the
    lips part. A neutral shape copies ``source``'s patch unchanged."""
    x0, y0, x1, y1 = g.box
    if shape.neutral:
        target[y0:y1, x0:x1] = source[y0:y1, x0:x1]
        return
    f = _Field(g, shape)
    u_up, v_up = f.solve(g.grid_u, g.grid_v, "upper")
    u_lo, v_lo = f.solve(g.grid_u, g.grid_v, "lower")
    # How far (px) an output pixel lies inside the opening, seen from each lip: the upper rule's
    # source falls below the seam there, the lower rule's above it.
    inside_up = (v_up - f.seam(u_up)) * np.float32(g.width)
    inside_lo = (f.seam(u_lo) - v_lo) * np.float32(g.width)
    use_upper = inside_up <= inside_lo
    su = np.where(use_upper, u_up, u_lo)
    sv = np.where(use_upper, v_up, v_lo)
    w = np.float32(g.width)
    map_x = np.float32(g.centre[0]) + w * (su * np.float32(g.axis_u[0]) + sv * np.float32(g.axis_v[0]))
    map_y = np.float32(g.centre[1]) + w * (su * np.float32(g.axis_u[1]) + sv * np.float32(g.axis_v[1]))
    lips = cv2.remap(source, map_x, map_y, cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)

    depth = np.minimum(inside_up, inside_lo)
    gap = inside_up + inside_lo  # the opening's height in this column, px
    # Coverage: by the sub-pixel distance to the nearer lip, and no more than the opening's height
    # (where the lips just touch, beyond the corners, nothing of the inside shows).
    alpha = np.clip(depth + 0.5, 0.0, 1.0) * np.clip(gap, 0.0, 1.0)
    if not (alpha > 0).any():
        target[y0:y1, x0:x1] = lips
        return
    # The inside: dark, darkest just under the upper teeth, the tongue's lighter red towards the
    # lower lip.
    gap = np.maximum(gap, 1e-3)
    across = np.clip(inside_up / gap, 0.0, 1.0)
    shade = 0.6 + 1.1 * _smoothstep(0.45, 1.0, across) * np.clip(gap / (0.12 * w), 0.0, 1.0)
    inside = g.interior_rgb[None, None, :] * shade[..., None]
    # Teeth: the upper row under the upper lip (unless the portrait's own teeth already show and
    # move with the lip), the lower row over the lower lip for spread lips; narrower than the
    # mouth, shaded towards the sides.
    across_u = np.abs(g.grid_u) / _TEETH_HALF_WIDTH
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
    out = lips.astype(np.float32)
    out += (inside - out) * alpha[..., None]
    target[y0:y1, x0:x1] = np.clip(out + 0.5, 0, 255).astype(np.uint8)
