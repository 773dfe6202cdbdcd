"""Person matte and face/hair mask for a portrait.

Three matte paths, chosen per image by :func:`person_matte`:

- ``"alpha"``: the file was a transparent cutout (RGBA with real transparency); its alpha *is* the
  matte, only cleaned of stray specks.
- ``"chroma"``: the background is a green screen (most of the top/left/right border is green in
  HSV). Keyed by how much green exceeds the other channels *relative to brightness* (so a shaded
  screen keys as well as a lit one), with a soft ramp for edges, then green spill is suppressed in
  a band along the person's edge (``G <= max(R, B)``, the classic limiter) and that de-spilled image
  replaces the portrait.
- ``"selfie-segmentation"``: everything else. mediapipe's selfie segmenter (weights ship in the
  wheel) gives a coarse 256x256-derived mask; a guided filter (He et al., "Guided Image Filtering",
  ECCV 2010) snaps it to the image's own edges, a smoothstep tightens it, and connected pieces
  that hold no detected body/face landmark are dropped (the segmenter hallucinates people in
  cats and coffee cups; holistic's landmarks are the stronger evidence).

Then, on every path (``clean=True``, the default; ``clean=False`` is the earlier matte, kept so
``newsmotion bench matte`` can measure before and after on the same photos):

- **no background fragments**: pieces joined to the person only through a thin neck (a flag's
  stripe touching a sleeve) are cut off by an opening by reconstruction: the solid matte is
  eroded by :data:`BRIDGE_RADIUS`, only eroded pieces holding a confident landmark are kept, and
  they grow back inside the original matte, so the person keeps its outline and the fragment
  goes; then whatever lies far from every landmark (:func:`person_region`, widened by
  :data:`REGION_MARGIN` shoulder widths) is cut too;
- **no halo**: the segmenter's edge is snapped to the photo's own edges by a second, fine guided
  filter (:data:`EDGE_RADIUS`) and tightened, so it does not reach into the old background;
- **spill suppressed**: the colour of every semi-transparent edge pixel is replaced by its
  estimated foreground colour (blur-fusion foreground estimation: Forte and Pitié,
  "Approximate Fast Foreground Colour Estimation", ICIP 2021), so the old background's colour
  (a light wall, a green screen) does not show as a fringe once composited. On chroma the
  green limiter runs first, as before;
- **no pockets** (segmented mattes only): small background pieces enclosed by the person, or open
  to the bottom edge only, are filled (:func:`fill_pockets`, at most :data:`POCKET_MAX` of the
  image); a chroma key's or a cutout's holes are real and stay.

:func:`face_mask` builds the region renders must keep stable: the iBUG-68 jaw + brows polygon,
extended up over forehead and hair and widened, united with a head ellipse from the body's nose
and ears (hair behind a turned head), feathered and intersected with the person matte.

All masks are uint8 alpha 0..255 at the size of the image they were computed on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import cv2
import numpy as np

from newsmotion_engine.nativelog import filter_native_stderr
from newsmotion_engine.skeleton import BODY, FACE68, FACE_START, PARTS

__all__ = [
    "MATTE_VERSION",
    "fill_pockets",
    "MatteResult",
    "matte_params",
    "green_border_fraction",
    "chroma_key",
    "despill",
    "selfie_segmentation",
    "refine_selfie",
    "person_matte",
    "face_mask",
    "cut_fragments",
    "person_region",
    "refine_edges",
    "estimate_foreground",
]

# Bump when anything below changes what a matte or face mask looks like.
MATTE_VERSION = 3

# Chroma detection: HSV (OpenCV ranges: H 0..180, S/V 0..255) bounds for "green screen" pixels,
# the border band inspected (fraction of the shorter side) and the fraction that must be green.
GREEN_HSV_LOW = (35, 70, 40)
GREEN_HSV_HIGH = (90, 255, 255)
BORDER_BAND = 0.03
GREEN_BORDER_MIN = 0.6
# Chroma key ramp on the brightness-relative green excess r = (G - max(R, B)) / G, as fractions of
# the screen's own median r: at or below LOW a pixel is person, at or above HIGH it is screen.
CHROMA_LOW = 0.35
CHROMA_HIGH = 0.75
# Below this green level the excess ratio is mostly sensor noise: dark pixels count as person.
CHROMA_DARK = 40.0
# Spill band: pixels up to this fraction of the image height inside the person's edge get the
# full de-green limiter, fading to none beyond it.
SPILL_BAND = 0.012
# Selfie refinement: guided filter radius (fraction of the longer side) and regularizer, then the
# smoothstep that turns the soft probability into a matte.
GUIDED_RADIUS = 0.008
GUIDED_EPS = 1e-3
SELFIE_LOW = 0.3
SELFIE_HIGH = 0.7
# Pieces of matte: landmark-free pieces are kept on chroma/alpha paths when at least this fraction
# of the image (a desk, a microphone), never on the selfie path.
KEEP_UNLABELLED_MIN = 0.01
LANDMARK_MIN_CONF = 0.5
# Cleaning (see the module docstring), as fractions of the image's longer side: thin necks below
# twice BRIDGE_RADIUS are cut; EDGE_RADIUS / EDGE_EPS are the fine guided filter and EDGE_RAMP the
# smoothstep after it; FOREGROUND_RADII the two blur-fusion passes (large, then small).
BRIDGE_RADIUS = 0.004
EDGE_RADIUS = 0.003
EDGE_EPS = 1e-4
EDGE_RAMP = (0.4, 0.6)
FOREGROUND_RADII = (0.07, 0.005)
# The matte is clipped (softly) to the landmarks' person region widened by this x shoulder width:
# background far from every landmark cannot be the person, however it is connected.
REGION_MARGIN = 0.5
# Background pockets of a segmented matte filled as person (fill_pockets): enclosed by the person,
# or open to the bottom edge only (the body goes on below the frame), and at most this fraction
# of the image (the astronaut's: 0.0002-0.0024; the gap under its held helmet, real background: 0.056).
POCKET_MAX = 0.003
POCKET_ALPHA = 0.95  # below this a pixel is not solid person (a dip shows the key colour too)
# Edge feather (Gaussian sigma, pixels at canvas scale) applied last.
FEATHER_SIGMA = 1.0
# Face mask: forehead/hair extension above the brows, widening around the face centre and the
# feather sigma, all relative to the brow-to-chin distance.
FACE_FOREHEAD = 0.75
FACE_WIDEN = 1.15
FACE_FEATHER = 0.04
# Head ellipse from nose + ears: centre lifted above the ears by HEAD_LIFT half-widths (the crown
# is above the ears), height HEAD_ASPECT times the half-width.
HEAD_LIFT = 0.3
HEAD_ASPECT = 1.25
# The selfie segmenter: 0 = the square "general" model (better on portraits than landscape 1).
SELFIE_MODEL = 0


def matte_params() -> dict[str, Any]:
    """Every constant a matte or face mask depends on (part of the persona cache's params)."""
    return {
        "version": MATTE_VERSION,
        "green_hsv": [list(GREEN_HSV_LOW), list(GREEN_HSV_HIGH)],
        "border_band": BORDER_BAND,
        "green_border_min": GREEN_BORDER_MIN,
        "chroma_ramp": [CHROMA_LOW, CHROMA_HIGH],
        "chroma_dark": CHROMA_DARK,
        "spill_band": SPILL_BAND,
        "guided": [GUIDED_RADIUS, GUIDED_EPS],
        "selfie_ramp": [SELFIE_LOW, SELFIE_HIGH],
        "selfie_model": SELFIE_MODEL,
        "keep_unlabelled_min": KEEP_UNLABELLED_MIN,
        "landmark_min_conf": LANDMARK_MIN_CONF,
        "feather_sigma": FEATHER_SIGMA,
        "clean": {
            "bridge_radius": BRIDGE_RADIUS,
            "edge": [EDGE_RADIUS, EDGE_EPS, list(EDGE_RAMP)],
            "foreground_radii": list(FOREGROUND_RADII),
            "region_margin": REGION_MARGIN,
            "pockets": [POCKET_MAX, POCKET_ALPHA],
        },
        "face": [FACE_FOREHEAD, FACE_WIDEN, FACE_FEATHER],
        "head": [HEAD_LIFT, HEAD_ASPECT],
    }


@dataclass(frozen=True)
class MatteResult:
    """A person matte: ``method``, ``alpha`` uint8 [H, W], the RGB to store as the portrait
    (de-spilled for chroma, else the input) and the measured green border fraction."""

    method: str
    alpha: np.ndarray
    rgb: np.ndarray
    green_border: float


def _smoothstep(x: np.ndarray, lo: float, hi: float) -> np.ndarray:
    t = np.clip((x - lo) / max(hi - lo, 1e-6), 0.0, 1.0)
    return t * t * (3.0 - 2.0 * t)


def _border_pixels(image: np.ndarray) -> np.ndarray:
    """Top, left and right bands (not the bottom: a waist-up shot is cut off there)."""
    h, w = image.shape[:2]
    band = max(2, round(BORDER_BAND * min(h, w)))
    parts = [image[:band].reshape(-1, *image.shape[2:]), image[band:, :band].reshape(-1, *image.shape[2:]),
             image[band:, w - band:].reshape(-1, *image.shape[2:])]
    return np.concatenate(parts, axis=0)


def _green_pixels(rgb: np.ndarray) -> np.ndarray:
    hsv = cv2.cvtColor(np.ascontiguousarray(rgb), cv2.COLOR_RGB2HSV)
    return cv2.inRange(hsv, GREEN_HSV_LOW, GREEN_HSV_HIGH) > 0


def green_border_fraction(rgb: np.ndarray) -> float:
    """Fraction of the top/left/right border that is chroma green (HSV range test)."""
    return float(_border_pixels(_green_pixels(rgb)).mean())


def _green_excess(rgb: np.ndarray) -> np.ndarray:
    f = rgb.astype(np.float32)
    g = f[..., 1]
    excess = (g - np.maximum(f[..., 0], f[..., 2])) / np.maximum(g, 1.0)
    return excess * np.clip(g / CHROMA_DARK, 0.0, 1.0)


def chroma_key(rgb: np.ndarray) -> np.ndarray:
    """Soft alpha (float32 0..1, 1 = person) of an image on a green screen, keyed against the
    screen's own median green excess measured on the border."""
    excess = _green_excess(rgb)
    border_green = _border_pixels(_green_pixels(rgb))
    screen = float(np.median(_border_pixels(excess)[border_green])) if border_green.any() else 0.5
    screen = max(screen, 0.1)
    return 1.0 - _smoothstep(excess, CHROMA_LOW * screen, CHROMA_HIGH * screen)


def despill(rgb: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """Remove green spill along the person's edge: within a band inside the edge (and on every
    semi-transparent pixel) green is limited to ``max(R, B)``; the interior keeps its colours
    (a teal tie stays teal), fully transparent pixels are left as they are."""
    h = rgb.shape[0]
    solid = (alpha >= 0.98).astype(np.uint8)
    dist = cv2.distanceTransform(solid, cv2.DIST_L2, 3)
    band = max(2.0, SPILL_BAND * h)
    weight = np.clip(1.0 - dist / band, 0.0, 1.0) * (alpha > 0.0)
    f = rgb.astype(np.float32)
    limit = np.maximum(f[..., 0], f[..., 2])
    f[..., 1] -= weight * np.maximum(f[..., 1] - limit, 0.0)
    return np.clip(f + 0.5, 0, 255).astype(np.uint8)


def selfie_segmentation(rgb: np.ndarray) -> np.ndarray:
    """mediapipe selfie segmentation: person probability float32 [H, W] in 0..1."""
    with filter_native_stderr():  # mediapipe's start-up log lines (see nativelog)
        import mediapipe as mp  # lazy: the GPU machine's engine runs without mediapipe

        with mp.solutions.selfie_segmentation.SelfieSegmentation(model_selection=SELFIE_MODEL) as seg:
            result = seg.process(np.ascontiguousarray(rgb))
    mask = result.segmentation_mask
    if mask is None:
        return np.zeros(rgb.shape[:2], np.float32)
    return np.clip(np.asarray(mask, np.float32), 0.0, 1.0)


def refine_selfie(rgb: np.ndarray, probability: np.ndarray) -> np.ndarray:
    """Snap a coarse person probability to the image's edges (guided filter), then tighten it with
    a smoothstep: float32 alpha 0..1."""
    radius = max(2, round(GUIDED_RADIUS * max(rgb.shape[:2])))
    guide = rgb.astype(np.float32) / 255.0
    guided = cv2.ximgproc.guidedFilter(guide, probability.astype(np.float32), radius, GUIDED_EPS)
    return _smoothstep(guided, SELFIE_LOW, SELFIE_HIGH).astype(np.float32)


def _landmark_pixels(landmarks: np.ndarray | None, shape: tuple[int, int]) -> list[tuple[int, int]]:
    """Confident body/face landmarks inside the image as (row, col) pixels."""
    if landmarks is None:
        return []
    h, w = shape
    idx = np.r_[np.arange(PARTS["body"].start, PARTS["body"].stop), np.arange(PARTS["face"].start, PARTS["face"].stop)]
    points = []
    for x, y, c in landmarks[idx]:
        if c >= LANDMARK_MIN_CONF and 0 <= x < 1 and 0 <= y < 1:
            points.append((int(y * h), int(x * w)))
    return points


def _keep_person_pieces(alpha: np.ndarray, landmarks: np.ndarray | None, keep_unlabelled: bool) -> np.ndarray:
    """Drop matte pieces that are not the person: keep pieces holding a confident landmark (and, if
    ``keep_unlabelled``, any piece of at least KEEP_UNLABELLED_MIN of the image); the largest
    piece when nothing qualifies. Soft edge pixels next to kept pieces survive."""
    solid = (alpha >= 0.5).astype(np.uint8)
    count, labels, stats, _ = cv2.connectedComponentsWithStats(solid, connectivity=8)
    if count <= 1:
        return alpha
    areas = stats[1:, cv2.CC_STAT_AREA]
    keep = np.zeros(count, bool)
    for row, col in _landmark_pixels(landmarks, alpha.shape):
        keep[labels[row, col]] = True
    keep[0] = False
    if keep_unlabelled:
        keep[1:] |= areas >= KEEP_UNLABELLED_MIN * alpha.size
    if not keep.any():
        keep[1 + int(np.argmax(areas))] = True
    kept = keep[labels].astype(np.uint8)
    grow = max(3, round(0.004 * max(alpha.shape)) * 2 + 1)
    near = cv2.dilate(kept, cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (grow, grow)))
    return alpha * near


def person_region(landmarks: np.ndarray | None, shape: tuple[int, int], margin: float | None = None) -> np.ndarray:
    """bool [H, W]: where a person with these landmarks (normalized to the image) can be: the
    convex hull of the confident body, face and hand points, extended straight down from the
    shoulders to the bottom edge (the body goes on below its last landmark), plus a point 1.2
    brow-to-chin above the brows (the hair), widened by ``margin`` (default
    :data:`REGION_MARGIN`) x the shoulder width (twice the face's width without shoulders).
    Everything when there are too few landmarks to tell."""
    h, w = shape
    margin = REGION_MARGIN if margin is None else margin
    if landmarks is None:
        return np.ones((h, w), bool)
    lm = np.asarray(landmarks, np.float64)
    px = lm[:, :2] * (w, h)
    idx = np.r_[np.arange(PARTS["body"].start, PARTS["body"].stop), np.arange(PARTS["face"].start, PARTS["face"].stop),
                np.arange(PARTS["left_hand"].start, PARTS["right_hand"].stop)]  # fmt: skip
    ok = lm[idx, 2] >= LANDMARK_MIN_CONF
    points = [px[idx][ok]]
    ls, rs = BODY["left_shoulder"], BODY["right_shoulder"]
    width = None
    if lm[ls, 2] >= LANDMARK_MIN_CONF and lm[rs, 2] >= LANDMARK_MIN_CONF:
        points.append(np.array([[px[ls, 0], h], [px[rs, 0], h]]))
        width = float(np.linalg.norm(px[ls] - px[rs]))
    face = lm[FACE_START : FACE_START + 68]
    if float(face[:, 2].mean()) >= 0.3:
        f = px[FACE_START : FACE_START + 68]
        brows = np.concatenate([f[FACE68["right_brow"]], f[FACE68["left_brow"]]]).mean(axis=0)
        face_h = float(np.linalg.norm(brows - f[FACE68["jaw"]][8]))
        points.append(np.array([brows - (0.0, 1.2 * face_h)]))
        width = width or 2.0 * float(np.ptp(f[:, 0]))
    pts = np.concatenate(points)
    region = np.zeros((h, w), np.uint8)
    if len(pts) < 3 or width is None:
        return np.ones((h, w), bool)
    hull = cv2.convexHull(np.round(pts).astype(np.int32))
    cv2.fillConvexPoly(region, hull, 1)
    r = max(1, round(margin * width))
    region = cv2.dilate(region, cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * r + 1, 2 * r + 1)))
    return region > 0


def _landmark_seeds(landmarks: np.ndarray | None, shape: tuple[int, int]) -> np.ndarray:
    seeds = np.zeros(shape, np.uint8)
    for row, col in _landmark_pixels(landmarks, shape):
        seeds[row, col] = 1
    return seeds


def cut_fragments(alpha: np.ndarray, landmarks: np.ndarray | None) -> np.ndarray:
    """Cut off matte pieces joined to the person only through necks thinner than twice
    :data:`BRIDGE_RADIUS` (opening by reconstruction, see the module docstring), then everything
    outside the landmarks' :func:`person_region`. ``alpha`` float 0..1; pieces are kept by
    confident landmarks (all of them when no landmark lands on one)."""
    region = cv2.GaussianBlur(person_region(landmarks, alpha.shape).astype(np.float32), (0, 0), 2.0)
    return _reconstruct(alpha, landmarks) * region


def _reconstruct(alpha: np.ndarray, landmarks: np.ndarray | None) -> np.ndarray:
    r = max(2, round(BRIDGE_RADIUS * max(alpha.shape)))
    solid = (alpha >= 0.5).astype(np.uint8)
    disc = cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * r + 1, 2 * r + 1))
    core = cv2.erode(solid, disc)
    count, labels = cv2.connectedComponents(core, connectivity=8)
    if count <= 1:
        return alpha
    keep = np.zeros(count, bool)
    # A landmark on the person's edge may fall just outside the eroded core: look around it.
    near = cv2.dilate(_landmark_seeds(landmarks, alpha.shape), disc)
    keep[np.unique(labels[(near > 0) & (core > 0)])] = True
    keep[0] = False
    if not keep.any():
        return alpha
    # Grow back inside the original matte (a few geodesic dilation steps: the erosion removed at
    # most r pixels of real outline).
    grown = keep[labels].astype(np.uint8)
    for _ in range(3):
        grown = cv2.dilate(grown, disc) & solid
    soft = cv2.dilate(grown, cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (5, 5))).astype(np.float32)
    return alpha * soft


def fill_pockets(alpha: np.ndarray, largest: float | None = None) -> np.ndarray:
    """Background pockets of a segmented matte (float 0..1) filled as person: pieces of the not
    quite solid matte (``alpha <`` :data:`POCKET_ALPHA`, 4-connected) that touch no top, left or
    right edge and are at most ``largest`` (default :data:`POCKET_MAX`) of the image. The segmenter leaves such holes where
    a glove, a badge or a shadow inside the body looked unlike a person; a pocket open to the
    bottom edge only counts too (the body continues below the frame). Real background seen
    through the body is larger (the gap under an arm, a held object's surroundings) and stays."""
    largest = POCKET_MAX if largest is None else largest
    h, w = alpha.shape
    # Below POCKET_ALPHA, not 0.5: a dip the segmenter left half-transparent shows the key colour as well.
    _, labels, stats, _ = cv2.connectedComponentsWithStats((alpha < POCKET_ALPHA).astype(np.uint8), connectivity=4)
    x, y, bw, bh, area = (stats[1:, i] for i in range(5))
    pocket = (y > 0) & (x > 0) & (x + bw < w) & (area <= largest * alpha.size)
    if not pocket.any():
        return alpha
    # The pocket's own soft rim (alpha between 0.5 and 1) goes solid too, or it would show as a
    # thin outline of the key colour: the fill is widened by a few pixels into the person around it.
    fill = np.r_[False, pocket][labels].astype(np.uint8)
    r = max(3, round(2 * EDGE_RADIUS * max(h, w)))  # about the edge refinement's soft width
    fill = cv2.dilate(fill, cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * r + 1, 2 * r + 1)))
    return np.maximum(alpha, fill.astype(alpha.dtype))


def refine_edges(rgb: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """Snap a matte's edge to the photo's own edges: a fine guided filter with the photo as the
    guide, then a smoothstep that keeps the edge from reaching into the background."""
    radius = max(1, round(EDGE_RADIUS * max(rgb.shape[:2])))
    guide = rgb.astype(np.float32) / 255.0
    guided = cv2.ximgproc.guidedFilter(guide, alpha.astype(np.float32), radius, EDGE_EPS)
    return _smoothstep(guided, *EDGE_RAMP).astype(np.float32)


def estimate_foreground(rgb: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """Foreground colour of every pixel (uint8 RGB) by blur-fusion (Forte and Pitié 2021): two
    passes of box-filtered foreground and background means, corrected by the pixel's own colour.
    Only pixels with ``0 < alpha < 1`` are changed; solid person and background stay as they are."""
    image = rgb.astype(np.float32) / 255.0
    a = alpha.astype(np.float32)[..., None]
    fg, bg = image, image
    for fraction in FOREGROUND_RADII:
        r = max(1, round(fraction * max(rgb.shape[:2])))
        size = (2 * r + 1, 2 * r + 1)
        blurred_a = cv2.blur(a[..., 0], size)[..., None]
        mean_fg = cv2.blur(fg * a, size) / (blurred_a + 1e-5)
        mean_bg = cv2.blur(bg * (1 - a), size) / ((1 - blurred_a) + 1e-5)
        fg = np.clip(mean_fg + a * (image - a * mean_fg - (1 - a) * mean_bg), 0.0, 1.0)
        bg = np.clip(mean_bg, 0.0, 1.0)
    edge = (a > 0.0) & (a < 1.0)
    out = np.where(edge, fg, image)
    return np.clip(out * 255.0 + 0.5, 0, 255).astype(np.uint8)


def _feather(alpha: np.ndarray) -> np.ndarray:
    return cv2.GaussianBlur(alpha, (0, 0), FEATHER_SIGMA)


def _to_u8(alpha: np.ndarray) -> np.ndarray:
    return np.clip(alpha * 255.0 + 0.5, 0, 255).astype(np.uint8)


def person_matte(
    rgb: np.ndarray,
    *,
    alpha_hint: np.ndarray | None = None,
    landmarks: np.ndarray | None = None,
    clean: bool = True,
) -> MatteResult:
    """The person matte of an RGB uint8 image (see the module docstring for the three paths and
    the cleaning).

    Args:
        rgb: uint8 [H, W, 3].
        alpha_hint: uint8 [H, W] alpha of a transparent cutout, used as the matte when given.
        landmarks: float32 [133, 3] normalized to this image; pieces without a landmark are dropped.
        clean: cut background fragments, refine the edge and replace edge colours by their
            foreground estimate (default); ``False`` gives the earlier matte (the bench's "before").

    Example::

        result = person_matte(rgb, landmarks=detect_image(rgb))
        result.method, result.alpha  # "chroma" / "selfie-segmentation" / "alpha", uint8 [H, W]
    """
    green = green_border_fraction(rgb)
    if alpha_hint is not None:
        method = "alpha"
        alpha = _keep_person_pieces(alpha_hint.astype(np.float32) / 255.0, landmarks, keep_unlabelled=True)
        out_rgb = rgb
    elif green >= GREEN_BORDER_MIN:
        method = "chroma"
        alpha = _keep_person_pieces(chroma_key(rgb), landmarks, keep_unlabelled=True)
        if clean:
            alpha = cut_fragments(alpha, landmarks)
        alpha = _feather(alpha)
        out_rgb = despill(rgb, alpha)
    else:
        method = "selfie-segmentation"
        alpha = refine_selfie(rgb, selfie_segmentation(rgb))
        alpha = _keep_person_pieces(alpha, landmarks, keep_unlabelled=False)
        if clean:
            alpha = fill_pockets(refine_edges(rgb, cut_fragments(alpha, landmarks)))
        alpha = _feather(alpha)
        out_rgb = rgb
    if clean and method != "alpha":
        out_rgb = estimate_foreground(out_rgb, np.clip(alpha, 0.0, 1.0))
    return MatteResult(method, _to_u8(alpha), out_rgb, green)


def _face_polygon(landmarks: np.ndarray, width: int, height: int) -> tuple[np.ndarray, float] | None:
    """Face + forehead/hair polygon in pixels from the iBUG-68 jaw and brows, with the face
    height; None without a detected face."""
    face = landmarks[FACE_START : FACE_START + 68]
    if float(face[:, 2].mean()) < 0.3:
        return None
    px = face[:, :2] * np.array([width, height], np.float32)
    jaw, brows = px[FACE68["jaw"]], np.concatenate([px[FACE68["right_brow"]], px[FACE68["left_brow"]]])
    chin = jaw[8]
    brow_mid = brows.mean(axis=0)
    up = brow_mid - chin
    face_h = float(np.linalg.norm(up))
    if face_h < 2.0:
        return None
    up /= face_h
    lift = FACE_FOREHEAD * face_h * up
    # Brows and the jaw's top ends lifted over the forehead; the ends less (hair falls at the sides).
    top = np.concatenate([brows + lift, jaw[[0, 16]] + 0.6 * lift])
    points = np.concatenate([jaw, brows, top])
    centre = points.mean(axis=0)
    points = centre + (points - centre) * FACE_WIDEN
    return points, face_h


def _head_from_body(landmarks: np.ndarray, width: int, height: int) -> tuple[np.ndarray, float] | None:
    """An ellipse polygon around the whole head from the body's nose and ears: covers the hair
    at the back of a head turned aside, which the face mesh (a frontal face model) leaves out.
    None without a confident nose and ear."""
    scale = np.array([width, height], np.float32)
    conf_ok = [n for n in ("nose", "left_ear", "right_ear") if landmarks[BODY[n], 2] >= LANDMARK_MIN_CONF]
    if "nose" not in conf_ok or len(conf_ok) < 2:
        return None
    nose = landmarks[BODY["nose"], :2] * scale
    ears = [landmarks[BODY[n], :2] * scale for n in conf_ok if n != "nose"]
    # Frontal: the ears bound the head's width; turned aside: the nose-to-ear distance does.
    half_w = 0.9 * max(float(np.linalg.norm(nose - e)) for e in ears)
    if len(ears) == 2:
        half_w = max(half_w, 0.6 * float(np.linalg.norm(ears[0] - ears[1])))
    if half_w < 2.0:
        return None
    centre = np.mean(ears, axis=0) - np.array([0.0, HEAD_LIFT * half_w], np.float32)
    poly = cv2.ellipse2Poly((0, 0), (1000, round(1000 * HEAD_ASPECT)), 0, 0, 360, 10).astype(np.float32)
    return centre + poly * (half_w / 1000.0), 2.0 * half_w


def face_mask(landmarks: np.ndarray, person_alpha: np.ndarray) -> np.ndarray:
    """Face + hair region (uint8 0..255, same size as ``person_alpha``) from landmarks normalized to
    that image: the union of the jaw/brow polygon extended over the forehead and a head ellipse
    from the body's nose and ears, feathered and intersected with the person matte. All zero when
    the image shows no head."""
    height, width = person_alpha.shape
    regions = [r for r in (_face_polygon(landmarks, width, height), _head_from_body(landmarks, width, height)) if r]
    if not regions:
        return np.zeros_like(person_alpha)
    mask = np.zeros((height, width), np.uint8)
    for points, _ in regions:
        hull = cv2.convexHull(np.round(points * 16).astype(np.int32))  # 4 fractional bits
        cv2.fillConvexPoly(mask, hull, 255, lineType=cv2.LINE_AA, shift=4)
    face_h = max(size for _, size in regions)
    mask = cv2.GaussianBlur(mask.astype(np.float32) / 255.0, (0, 0), max(1.0, FACE_FEATHER * face_h))
    return _to_u8(mask * (person_alpha.astype(np.float32) / 255.0))
