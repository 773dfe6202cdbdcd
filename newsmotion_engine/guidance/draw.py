"""DWPose-style pose maps: the guidance video that pose-driven diffusion backends consume.

The look follows the OpenPose/DWPose renderers those models were trained on (Cao et al.,
"OpenPose", https://arxiv.org/abs/1812.08008; Yang et al., "DWPose",
https://arxiv.org/abs/2307.15880): on a black background,

- the body as the 18-point OpenPose skeleton (COCO body plus a neck at the midpoint of the
  shoulders), each limb a filled ellipse in its standard colour at 60 % opacity, each joint a
  solid circle in its colour;
- each hand as 20 bones coloured around the HSV hue circle, with a small blue dot per point;
- the face as small white dots.

A point whose confidence is below ``conf_threshold`` is not drawn, nor is any limb or bone
touching it. Stroke widths scale with the image size (DWPose's widths are for ~512 px images).

Example::

    from newsmotion_engine.guidance.choreography import author_loop
    from newsmotion_engine.guidance.draw import draw_pose, png_bytes

    kp = author_loop("welcome")                      # [120, 133, 3]
    frame = draw_pose(kp[0], 720, 1280)              # uint8 [1280, 720, 3] RGB
    open("pose.png", "wb").write(png_bytes(frame))
"""

from __future__ import annotations

import colorsys
from collections.abc import Iterator

import cv2
import numpy as np

from newsmotion_engine import skeleton as sk

# OpenPose-18 point -> COCO-WholeBody index. Index 1 (neck) has no COCO point: it is the midpoint
# of the shoulders (marked -1 here and filled in by `_openpose_body`).
_OPENPOSE_FROM_COCO = np.array([0, -1, 6, 8, 10, 5, 7, 9, 12, 14, 16, 11, 13, 15, 2, 1, 4, 3])

# OpenPose limbs as pairs of OpenPose-18 indices (0-based). The original list has two more
# (ear-to-shoulder) that DWPose does not draw; neither do we.
_LIMBS = np.array([
    (1, 2), (1, 5), (2, 3), (3, 4), (5, 6), (6, 7), (1, 8), (8, 9), (9, 10),
    (1, 11), (11, 12), (12, 13), (1, 0), (0, 14), (14, 16), (0, 15), (15, 17),
])

# The standard OpenPose colour wheel (RGB), one per limb and one per joint, in order.
_COLORS = (
    (255, 0, 0), (255, 85, 0), (255, 170, 0), (255, 255, 0), (170, 255, 0), (85, 255, 0),
    (0, 255, 0), (0, 255, 85), (0, 255, 170), (0, 255, 255), (0, 170, 255), (0, 85, 255),
    (0, 0, 255), (85, 0, 255), (170, 0, 255), (255, 0, 255), (255, 0, 170), (255, 0, 85),
)

# One hue per hand bone, spread evenly around the colour circle (as DWPose does).
_HAND_EDGES = np.array(sk.HAND_EDGES)
_HAND_COLORS = tuple(
    tuple(int(round(255 * c)) for c in colorsys.hsv_to_rgb(i / len(_HAND_EDGES), 1.0, 1.0))
    for i in range(len(_HAND_EDGES))
)
_HAND_DOT = (0, 0, 255)
_FACE_DOT = (255, 255, 255)
_LIMB_OPACITY = 0.6

# DWPose's pixel sizes at its ~512 px working resolution; scaled by min(width, height) / 512.
_REF_SIZE = 512.0
_STICK_HALF_WIDTH = 4.0
_BODY_RADIUS = 4.0
_HAND_LINE = 2.0
_HAND_RADIUS = 4.0
_FACE_RADIUS = 3.0


def _check_frame(keypoints: np.ndarray) -> np.ndarray:
    kp = np.asarray(keypoints, dtype=np.float32)
    if kp.shape != (sk.NUM_KEYPOINTS, 3):
        raise ValueError(f"draw_pose expects one frame of keypoints [133, 3]; got shape {kp.shape}")
    return kp


def _openpose_body(kp: np.ndarray) -> np.ndarray:
    """COCO body points -> OpenPose-18 ``[18, 3]`` (x, y, conf), neck = mid-shoulders."""
    body = kp[np.maximum(_OPENPOSE_FROM_COCO, 0)].copy()
    ls, rs = kp[sk.BODY["left_shoulder"]], kp[sk.BODY["right_shoulder"]]
    body[1, :2] = (ls[:2] + rs[:2]) / 2
    # The neck exists only where both shoulders do (as in DWPose).
    body[1, 2] = min(ls[2], rs[2])
    return body


class _Sizes:
    """Stroke sizes in pixels for one output resolution."""

    def __init__(self, width: int, height: int):
        scale = min(width, height) / _REF_SIZE
        self.stick = max(1, int(round(_STICK_HALF_WIDTH * scale)))
        self.body_r = max(1, int(round(_BODY_RADIUS * scale)))
        self.hand_line = max(1, int(round(_HAND_LINE * scale)))
        self.hand_r = max(1, int(round(_HAND_RADIUS * scale)))
        self.face_r = max(1, int(round(_FACE_RADIUS * scale)))


def _draw_limbs(canvas: np.ndarray, body: np.ndarray, ok: np.ndarray, sizes: _Sizes) -> None:
    h, w = canvas.shape[:2]
    a, b = _LIMBS[:, 0], _LIMBS[:, 1]
    draw = ok[a] & ok[b]
    if not draw.any():
        return
    # Ellipse geometry for all limbs at once; only the cv2 calls loop.
    p, q = body[a, :2], body[b, :2]
    centers = (p + q) / 2
    delta = q - p
    lengths = np.hypot(delta[:, 0], delta[:, 1])
    angles = np.degrees(np.arctan2(delta[:, 1], delta[:, 0]))
    pad = sizes.stick + 1
    for i in np.flatnonzero(draw):
        poly = cv2.ellipse2Poly(
            (int(round(centers[i, 0])), int(round(centers[i, 1]))),
            (int(round(lengths[i] / 2)), sizes.stick), int(round(angles[i])), 0, 360, 1,
        )
        # Blend only the limb's bounding box: per-limb transparency (later limbs show earlier ones
        # through them, as in OpenPose) without a full-frame blend per limb.
        x0, y0 = np.maximum(poly.min(axis=0) - pad, 0)
        x1, y1 = np.minimum(poly.max(axis=0) + pad + 1, (w, h))
        if x1 <= x0 or y1 <= y0:
            continue  # entirely off-canvas
        roi = canvas[y0:y1, x0:x1]
        layer = roi.copy()
        cv2.fillConvexPoly(layer, poly - np.array([x0, y0], dtype=poly.dtype), _COLORS[i])
        cv2.addWeighted(roi, 1.0 - _LIMB_OPACITY, layer, _LIMB_OPACITY, 0.0, dst=roi)


def draw_pose(
    keypoints: np.ndarray,
    width: int,
    height: int,
    *,
    conf_threshold: float = 0.3,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """Draw one frame of canonical keypoints as a DWPose-style pose map.

    Args:
        keypoints: float ``[133, 3]`` in the canonical skeleton (x, y normalized, confidence).
        width, height: output size in pixels.
        conf_threshold: points with a lower confidence (and limbs/bones touching them) are skipped.
        out: optional ``uint8 [height, width, 3]`` buffer to draw into (cleared first), so a video
            loop can reuse one buffer.

    Returns:
        ``uint8 [height, width, 3]`` RGB image (``out`` itself when given).
    """
    kp = _check_frame(keypoints)
    width, height = int(width), int(height)
    if width < 1 or height < 1:
        raise ValueError(f"draw_pose needs a positive size; got {width}x{height}")
    if out is None:
        canvas = np.zeros((height, width, 3), dtype=np.uint8)
    else:
        if out.shape != (height, width, 3) or out.dtype != np.uint8:
            raise ValueError(
                f"out must be uint8 [{height}, {width}, 3]; got {out.dtype} {list(out.shape)}"
            )
        canvas = out
        canvas.fill(0)
    sizes = _Sizes(width, height)
    scale = np.array([width, height], dtype=np.float32)

    # Non-finite coordinates count as absent (cv2 cannot draw them anyway).
    finite = np.isfinite(kp).all(axis=1)
    px = np.where(finite[:, None], kp[:, :2] * scale, 0.0)
    ok_all = finite & (kp[:, 2] >= conf_threshold)
    ipx = np.rint(px).astype(np.int32)

    # Body: limbs, then joints on top.
    body = _openpose_body(np.concatenate([px, np.where(ok_all, 1.0, 0.0)[:, None]], axis=1))
    body_ok = body[:, 2] > 0.5
    _draw_limbs(canvas, body, body_ok, sizes)
    body_i = np.rint(body[:, :2]).astype(np.int32)
    for j in np.flatnonzero(body_ok):
        cv2.circle(canvas, (int(body_i[j, 0]), int(body_i[j, 1])), sizes.body_r, _COLORS[j], -1)

    # Hands: coloured bones, then dots.
    for start in (sk.LEFT_HAND_START, sk.RIGHT_HAND_START):
        hand_i = ipx[start:start + 21]
        hand_ok = ok_all[start:start + 21]
        for e in np.flatnonzero(hand_ok[_HAND_EDGES[:, 0]] & hand_ok[_HAND_EDGES[:, 1]]):
            a, b = _HAND_EDGES[e]
            cv2.line(
                canvas, (int(hand_i[a, 0]), int(hand_i[a, 1])), (int(hand_i[b, 0]), int(hand_i[b, 1])),
                _HAND_COLORS[e], sizes.hand_line,
            )
        for j in np.flatnonzero(hand_ok):
            cv2.circle(canvas, (int(hand_i[j, 0]), int(hand_i[j, 1])), sizes.hand_r, _HAND_DOT, -1)

    # Face: white dots.
    face = sk.PARTS["face"]
    face_i = ipx[face]
    for j in np.flatnonzero(ok_all[face]):
        cv2.circle(canvas, (int(face_i[j, 0]), int(face_i[j, 1])), sizes.face_r, _FACE_DOT, -1)
    return canvas


def draw_pose_video(keypoints: np.ndarray, width: int, height: int, **kw) -> Iterator[np.ndarray]:
    """Yield one pose map per frame of ``keypoints`` ``[T, 133, 3]`` (see :func:`draw_pose`).

    Frames are drawn lazily, one at a time, so a long clip is never held in memory. Each yielded
    image is a fresh array unless ``out=`` is passed, in which case that buffer is reused (the
    caller must consume each frame before asking for the next).
    """
    kp = np.asarray(keypoints)
    if kp.ndim != 3 or kp.shape[1:] != (sk.NUM_KEYPOINTS, 3):
        raise ValueError(f"draw_pose_video expects keypoints [T, 133, 3]; got shape {kp.shape}")
    for frame in kp:
        yield draw_pose(frame, width, height, **kw)


def contact_sheet(keypoints: np.ndarray, width: int = 180, height: int = 320, count: int = 6) -> np.ndarray:
    """``count`` evenly spaced frames of a loop drawn side by side: ``uint8 [height, count*width, 3]``.

    Frames ``i * T // count`` are shown (for a seamless loop the last tile is not a repeat of the
    first). Each tile after the first has a 1 px grey divider at its left edge.
    """
    kp = np.asarray(keypoints)
    if kp.ndim != 3 or kp.shape[1:] != (sk.NUM_KEYPOINTS, 3) or kp.shape[0] < 1:
        raise ValueError(f"contact_sheet expects keypoints [T>=1, 133, 3]; got shape {kp.shape}")
    if count < 1:
        raise ValueError(f"contact_sheet count must be >= 1; got {count}")
    frames = kp.shape[0]
    sheet = np.zeros((height, width * count, 3), dtype=np.uint8)
    for tile, index in enumerate(np.arange(count) * frames // count):
        view = sheet[:, tile * width:(tile + 1) * width]
        # draw_pose wants a contiguous buffer; a column slice of the sheet is not one.
        view[:] = draw_pose(kp[index], width, height)
        if tile:
            view[:, 0] = 64
    return sheet


def png_bytes(image: np.ndarray) -> bytes:
    """Encode an RGB ``uint8 [H, W, 3]`` image as PNG bytes."""
    img = np.asarray(image)
    if img.dtype != np.uint8 or img.ndim != 3 or img.shape[2] != 3:
        raise ValueError(f"png_bytes expects uint8 [H, W, 3] RGB; got {img.dtype} {list(img.shape)}")
    ok, buf = cv2.imencode(".png", cv2.cvtColor(img, cv2.COLOR_RGB2BGR))
    if not ok:
        raise RuntimeError(f"cv2 could not encode a {img.shape[1]}x{img.shape[0]} image as PNG")
    return buf.tobytes()


def stroke_sizes(width: int, height: int) -> dict[str, int]:
    """The pixel sizes :func:`draw_pose` uses at this resolution (for tests and docs)."""
    s = _Sizes(width, height)
    return {"limb_half_width": s.stick, "body_radius": s.body_r, "hand_line": s.hand_line,
            "hand_radius": s.hand_r, "face_radius": s.face_r}


def pose_style(conf_threshold: float = 0.3) -> dict:
    """What :func:`draw_pose` draws, as plain data (JSON-able), so another renderer (the studio's
    browser overlay) draws the same skeleton in the same colours without a copy of these tables:
    the OpenPose-18 body built from COCO points (``-1`` = the neck, mid-shoulders), its limbs and
    colours, the hand bones and hues, the dot colours, the limb opacity and the stroke sizes at
    ``ref_size`` px (scale by ``min(width, height) / ref_size``)."""
    return {
        "openpose_from_coco": [int(i) for i in _OPENPOSE_FROM_COCO],
        "limbs": _LIMBS.tolist(),
        "colors": [list(c) for c in _COLORS],
        "hand_starts": [sk.LEFT_HAND_START, sk.RIGHT_HAND_START],
        "hand_edges": _HAND_EDGES.tolist(),
        "hand_colors": [list(c) for c in _HAND_COLORS],
        "hand_dot": list(_HAND_DOT),
        "face": [sk.PARTS["face"].start, sk.PARTS["face"].stop],
        "face_dot": list(_FACE_DOT),
        "limb_opacity": _LIMB_OPACITY,
        "ref_size": _REF_SIZE,
        "sizes": {"limb_half_width": _STICK_HALF_WIDTH, "body_radius": _BODY_RADIUS, "hand_line": _HAND_LINE,
                  "hand_radius": _HAND_RADIUS, "face_radius": _FACE_RADIUS},
        "conf_threshold": conf_threshold,
    }


__all__ = ["draw_pose", "draw_pose_video", "contact_sheet", "png_bytes", "pose_style", "stroke_sizes"]
