"""Portrait loading and normalization onto the fixed persona canvas.

Two steps, both pure functions of their inputs:

1. :func:`read_portrait` opens a user's file (JPEG, PNG, WebP) and returns it upright as 8-bit RGB,
   plus its alpha channel when it has a real one. The file is opened lazily: format and size are
   checked from the header *before* any pixel is decoded, so a 20000x20000 "image" costs nothing.
   Palette, grayscale, 16-bit, CMYK and EXIF-rotated inputs are all normalized.
2. Placement on the 720x1280 (9:16) canvas, by the portrait's *framing* (:data:`FRAMINGS`):

   - ``medium`` (default): the broadcast medium shot. The top of the head sits at
     :data:`HEADROOM` (10%) of the canvas height, the shoulders' centre on the canvas's centre
     line, and the shot reaches down to the photo's bottom edge (where a waist-up photo is cut),
     or to just below the hips when the photo shows them; the sides may be cropped (a headshot
     is, in 9:16). Never enlarged past :data:`MAX_UPSCALE` (2.5x) the photo's own pixels: a photo
     too small for that keeps its bottom edge on the canvas's bottom edge (no floating torso) and
     gets more headroom, and the metadata says so.
   - ``wide``: the whole width of the photo stays in view; head at 10% when the photo is tall
     enough, else bottom-anchored.
   - ``as-is``: scale to fit, bottom-centre (the earlier behaviour).

   :func:`framing_placement` decides from the head top, shoulders and hips
   (:class:`FramingTargets`, measured by the persona build from the landmarks and the matte);
   :func:`place_image` puts the source onto the canvas in one resampling (no oversized
   intermediate). The rest of the canvas is filled by replicating the image's edge pixels: a
   plausible background for a diffusion model's reference image, and the person matte marks it as
   not-person anyway. :class:`Placement` records the transform ``canvas = source * scale + offset``.

Every unusable file raises :class:`~newsmotion_engine.errors.BadInputError` naming the file.
"""

from __future__ import annotations

import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import cv2
import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from newsmotion_engine.errors import BadInputError

__all__ = [
    "CANVAS_WIDTH",
    "CANVAS_HEIGHT",
    "PIXEL_LIMIT",
    "MIN_SIDE",
    "FORMATS",
    "CHROMA_GREEN",
    "Portrait",
    "Placement",
    "probe_portrait",
    "read_portrait",
    "load_portrait",
    "fit_to_canvas",
    "placement_for",
    "FRAMINGS",
    "DEFAULT_FRAMING",
    "HEADROOM",
    "HEADROOM_RANGE",
    "MAX_UPSCALE",
    "FramingTargets",
    "framing_params",
    "framing_placement",
    "place_image",
    "visible_window",
    "scale_block",
    "place_on_canvas",
]

CANVAS_WIDTH = 720
CANVAS_HEIGHT = 1280
# Refused from the header, before decoding: 50 MP is well above any camera portrait (a 45 MP
# full-frame still is 8192x5464) and caps decoding memory at ~150 MB of RGB.
PIXEL_LIMIT = 50_000_000
# A shorter side below this cannot carry a usable face at canvas scale.
MIN_SIDE = 64
# PIL format names accepted (MPO is how PIL reports multi-picture JPEGs from phone cameras).
FORMATS = {"JPEG": "JPEG", "MPO": "JPEG", "PNG": "PNG", "WEBP": "WebP"}
# Colour that transparent pixels of an RGBA cutout are composited onto (broadcast chroma green).
CHROMA_GREEN = (0, 177, 64)
# Framing (see the module docstring). Headroom: top of the head at this fraction of the canvas
# height (the broadcast rule of thumb is 8-12%); never enlarge a photo past MAX_UPSCALE of its own
# pixels (beyond it a 512 px photo turns to mush at 720x1280).
FRAMINGS = ("medium", "wide", "as-is")
DEFAULT_FRAMING = "medium"
HEADROOM = 0.10
HEADROOM_RANGE = (0.08, 0.12)
MAX_UPSCALE = 2.5
# A medium shot shown to the hips ends this many torso lengths (neck to hips) below them.
BELOW_HIPS = 0.15
# An alpha channel counts as a matte only if this fraction of pixels is clearly transparent;
# below it (e.g. an opaque PNG saved with alpha) the channel carries no information.
_ALPHA_MIN_TRANSPARENT = 0.01


@dataclass(frozen=True)
class Portrait:
    """A decoded portrait: upright 8-bit RGB, the alpha channel if the file had a meaningful one,
    and what the file was."""

    rgb: np.ndarray  # uint8 [H, W, 3]; transparent pixels composited onto CHROMA_GREEN
    alpha: np.ndarray | None  # uint8 [H, W] or None
    info: dict[str, Any]  # format, mode, bits, exif_orientation, width, height (upright)


@dataclass(frozen=True)
class Placement:
    """Where the source image sits on the canvas: ``canvas_xy = source_xy * scale + offset``
    (pixels), the scaled image covering ``[offset_x, offset_x + width) x [offset_y, offset_y +
    height)``."""

    scale_x: float
    scale_y: float
    offset_x: int
    offset_y: int
    width: int
    height: int

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _open(path: Path) -> Image.Image:
    if not path.exists():
        raise BadInputError(path, "file not found")
    if not path.is_file():
        raise BadInputError(path, "not a file")
    try:
        # PIL's own decompression-bomb guard fires at open for > 2x its MAX_IMAGE_PIXELS and warns
        # above 1x; our (lower) PIXEL_LIMIT is checked right after, so the warning is noise here.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            return Image.open(path)
    except Image.DecompressionBombError as exc:
        raise BadInputError(
            path, f"image too large ({exc.args[0].split(',')[0]}); the limit is {PIXEL_LIMIT:,} pixels"
        ) from None
    except UnidentifiedImageError:
        raise BadInputError(path, "not an image (no JPEG, PNG or WebP header found)") from None
    except OSError as exc:
        raise BadInputError(path, f"cannot read the file ({exc})") from None


def _check_header(path: Path, img: Image.Image) -> None:
    if img.format not in FORMATS:
        raise BadInputError(path, f"unsupported image format {img.format}: use JPEG, PNG or WebP")
    width, height = img.size
    if width * height > PIXEL_LIMIT:
        raise BadInputError(
            path, f"image too large ({width}x{height} = {width * height:,} pixels); the limit is {PIXEL_LIMIT:,} pixels"
        )
    if min(width, height) < MIN_SIDE:
        raise BadInputError(path, f"image too small ({width}x{height}); portraits need at least {MIN_SIDE} px per side")


def _to_8bit(arr: np.ndarray) -> np.ndarray:
    """Scale a 16-bit (or 32-bit integer holding 16-bit data) array down to uint8 by value, not by
    clipping (PIL's own ``convert("L")`` clips 16-bit values at 255)."""
    if arr.dtype == np.uint8:
        return arr
    if arr.dtype == np.bool_:
        return arr.astype(np.uint8) * 255
    if np.issubdtype(arr.dtype, np.floating):
        top = 1.0 if float(np.nanmax(arr)) <= 1.0 else 255.0
        return np.clip(np.nan_to_num(arr) / top * 255.0 + 0.5, 0, 255).astype(np.uint8)
    # Integer modes "I;16*" and "I": PNG 16-bit gray decodes to one of them. Values are 0..65535.
    return (np.clip(arr.astype(np.int64), 0, 65535) // 257).astype(np.uint8)


def _decode(path: Path, img: Image.Image) -> tuple[np.ndarray, np.ndarray | None, str]:
    """Pixels as (RGB uint8, alpha uint8 or None, original mode)."""
    mode = img.mode
    if mode == "P" or mode == "PA":
        img = img.convert("RGBA")
    elif mode in ("1", "CMYK", "YCbCr", "LAB", "HSV"):
        img = img.convert("RGB")
    elif mode == "La":
        img = img.convert("LA")
    elif mode == "RGBa":
        img = img.convert("RGBA")
    arr = np.asarray(img)
    if arr.ndim == 2:  # L, I, I;16*, F
        gray = _to_8bit(arr)
        return np.repeat(gray[:, :, None], 3, axis=2), None, mode
    if arr.shape[2] == 2:  # LA
        gray, alpha = _to_8bit(arr[:, :, 0]), _to_8bit(arr[:, :, 1])
        return np.repeat(gray[:, :, None], 3, axis=2), alpha, mode
    if arr.shape[2] == 4:
        return _to_8bit(arr[:, :, :3]), _to_8bit(arr[:, :, 3]), mode
    if arr.shape[2] == 3:
        return _to_8bit(arr), None, mode
    raise BadInputError(path, f"unsupported pixel layout (mode {mode}, {arr.shape[2]} channels)")


def probe_portrait(path: str | Path) -> tuple[str, int, int]:
    """``(format, width, height)`` from the file's header alone (nothing decoded), after the same
    format and size checks :func:`read_portrait` makes; raises :class:`BadInputError`."""
    path = Path(path)
    with _open(path) as img:
        _check_header(path, img)
        return FORMATS[img.format], img.size[0], img.size[1]


def read_portrait(path: str | Path) -> Portrait:
    """Decode a portrait file upright as 8-bit RGB, keeping a meaningful alpha channel.

    Format and size are checked from the header before decoding: JPEG, PNG or WebP only, at most
    :data:`PIXEL_LIMIT` pixels, at least :data:`MIN_SIDE` per side. EXIF orientation is applied.
    A transparent cutout's hidden pixels are composited onto :data:`CHROMA_GREEN`; its alpha is
    returned so the matte can use it. Raises :class:`BadInputError` (one line: file + problem).
    """
    path = Path(path)
    img = _open(path)
    with img:
        _check_header(path, img)
        exif_orientation = 1
        try:
            img.load()
            exif_orientation = int(img.getexif().get(0x0112, 1) or 1)
            upright = ImageOps.exif_transpose(img)
        except (OSError, SyntaxError, ValueError, EOFError) as exc:
            raise BadInputError(path, f"cannot decode the image, truncated or damaged ({exc})") from None
        rgb, alpha, mode = _decode(path, upright)
        info = {
            "format": FORMATS[img.format],
            "mode": mode,
            "exif_orientation": exif_orientation,
            "width": int(rgb.shape[1]),
            "height": int(rgb.shape[0]),
        }
    if alpha is not None and float((alpha < 128).mean()) < _ALPHA_MIN_TRANSPARENT:
        alpha = None
    if alpha is not None:
        a = alpha.astype(np.float32)[:, :, None] / 255.0
        green = np.array(CHROMA_GREEN, np.float32)
        rgb = np.clip(rgb.astype(np.float32) * a + green * (1.0 - a) + 0.5, 0, 255).astype(np.uint8)
    info["alpha_matte"] = alpha is not None
    return Portrait(rgb=np.ascontiguousarray(rgb), alpha=alpha, info=info)


def load_portrait(path: str | Path) -> np.ndarray:
    """Load a portrait as upright uint8 RGB ``[H, W, 3]`` (see :func:`read_portrait`; a transparent
    cutout comes back composited onto chroma green).

    Example::

        rgb = load_portrait("anchor.jpg")  # raises BadInputError for unusable files
    """
    return read_portrait(path).rgb


def _resize(image: np.ndarray, width: int, height: int) -> np.ndarray:
    if (image.shape[1], image.shape[0]) == (width, height):
        return image.copy()
    shrinking = width < image.shape[1]
    # INTER_AREA averages when shrinking (no aliasing); Lanczos keeps edges crisp when enlarging.
    return cv2.resize(image, (width, height), interpolation=cv2.INTER_AREA if shrinking else cv2.INTER_LANCZOS4)


def placement_for(width: int, height: int, canvas: tuple[int, int] = (CANVAS_WIDTH, CANVAS_HEIGHT)) -> Placement:
    """Scale-to-fit, bottom-centre placement of a ``width x height`` image on ``canvas`` (w, h)."""
    cw, ch = canvas
    scale = min(cw / width, ch / height)
    w = min(cw, max(1, round(width * scale)))
    h = min(ch, max(1, round(height * scale)))
    return Placement(scale_x=w / width, scale_y=h / height, offset_x=(cw - w) // 2, offset_y=ch - h, width=w, height=h)


def scale_block(image: np.ndarray, placement: Placement) -> np.ndarray:
    """The source image (or a mask of its size) resized to the placement's block size."""
    return _resize(image, placement.width, placement.height)


def place_on_canvas(
    block: np.ndarray,
    placement: Placement,
    *,
    fill: str = "replicate",
    canvas: tuple[int, int] = (CANVAS_WIDTH, CANVAS_HEIGHT),
) -> np.ndarray:
    """Put a block (already at placement size) onto the canvas: ``fill="replicate"`` extends its
    edge pixels, ``fill="zero"`` leaves zeros (for masks)."""
    cw, ch = canvas
    top, left = placement.offset_y, placement.offset_x
    bottom, right = ch - top - placement.height, cw - left - placement.width
    if fill == "replicate":
        return cv2.copyMakeBorder(block, top, bottom, left, right, cv2.BORDER_REPLICATE)
    if fill == "zero":
        return cv2.copyMakeBorder(block, top, bottom, left, right, cv2.BORDER_CONSTANT, value=0)
    raise ValueError(f"unknown fill {fill!r}")


@dataclass(frozen=True)
class FramingTargets:
    """What framing needs from a portrait, in source pixels: the top of the head (hair
    included), the shoulders' centre x (``None``: no shoulders, the head's centre is used) and
    the hips' y (``None`` when the photo does not show them)."""

    head_top_y: float
    centre_x: float
    hips_y: float | None = None
    neck_y: float | None = None


def framing_params(framing: str) -> dict[str, Any]:
    """Everything a framing depends on (part of the persona cache's params)."""
    if framing not in FRAMINGS:
        raise ValueError(f"framing {framing!r} is not one of {', '.join(FRAMINGS)}")
    if framing == "as-is":
        return {"mode": framing, "anchor": "bottom-centre"}
    return {"mode": framing, "headroom": HEADROOM, "max_upscale": MAX_UPSCALE, "below_hips": BELOW_HIPS}


def framing_placement(
    framing: str,
    width: int,
    height: int,
    targets: FramingTargets | None,
    canvas: tuple[int, int] = (CANVAS_WIDTH, CANVAS_HEIGHT),
) -> tuple[Placement, dict[str, Any]]:
    """The placement of a ``width`` x ``height`` photo for ``framing`` (see the module docstring)
    and a report ``{"mode", "scale", "headroom", "limited_by"}`` (``headroom``: where the head top
    landed, as a fraction of the canvas height; ``limited_by``: ``"upscale"`` when
    :data:`MAX_UPSCALE` kept the head from :data:`HEADROOM`, else ``None``). Without targets
    (no head found) every framing falls back to ``as-is``."""
    if framing not in FRAMINGS:
        raise ValueError(f"framing {framing!r} is not one of {', '.join(FRAMINGS)}")
    cw, ch = canvas
    if framing == "as-is" or targets is None:
        placement = placement_for(width, height, canvas)
        top = None if targets is None else (placement.offset_y + targets.head_top_y * placement.scale_y) / ch
        return placement, {"mode": "as-is", "requested": framing, "scale": round(placement.scale_x, 4),
                           "headroom": None if top is None else round(top, 4), "limited_by": None}  # fmt: skip
    head = float(np.clip(targets.head_top_y, 0.0, height - 1.0))
    bottom = float(height)
    if framing == "medium" and targets.hips_y is not None and targets.neck_y is not None:
        bottom = min(bottom, targets.hips_y + BELOW_HIPS * max(targets.hips_y - targets.neck_y, 0.0))
    span = max(bottom - head, 1.0)
    scale = (1.0 - HEADROOM) * ch / span  # head at HEADROOM, the shot's bottom on the canvas's
    limited = None
    if framing == "wide":
        scale = min(scale, cw / width)
    if scale > MAX_UPSCALE:
        scale, limited = MAX_UPSCALE, "upscale"
    w, h = max(1, round(width * scale)), max(1, round(height * scale))
    # Head top on the headroom line, unless the photo's bottom edge would then float above the
    # canvas's bottom: then that edge goes on the canvas's bottom and the head gets more room
    # (only when MAX_UPSCALE limited the scale, or for a wide shot).
    oy = max(HEADROOM * ch - head * scale, ch - height * scale)
    ox = cw / 2.0 - targets.centre_x * scale
    if framing == "wide" and w <= cw:
        ox = float(np.clip(ox, 0.0, cw - w))  # the whole width stays in view
    placement = Placement(scale_x=w / width, scale_y=h / height, offset_x=int(round(ox)), offset_y=int(round(oy)), width=w, height=h)
    top = (placement.offset_y + head * placement.scale_y) / ch
    return placement, {"mode": framing, "requested": framing, "scale": round(placement.scale_x, 4),
                       "headroom": round(top, 4), "limited_by": limited}  # fmt: skip


def visible_window(placement: Placement, canvas: tuple[int, int] = (CANVAS_WIDTH, CANVAS_HEIGHT)) -> tuple[int, int, int, int]:
    """``(x0, y0, x1, y1)``: the part of the canvas the placed photo covers."""
    cw, ch = canvas
    x0, y0 = max(0, placement.offset_x), max(0, placement.offset_y)
    x1, y1 = min(cw, placement.offset_x + placement.width), min(ch, placement.offset_y + placement.height)
    return x0, y0, max(x0, x1), max(y0, y1)


def place_image(
    image: np.ndarray,
    placement: Placement,
    *,
    fill: str = "replicate",
    canvas: tuple[int, int] = (CANVAS_WIDTH, CANVAS_HEIGHT),
) -> np.ndarray:
    """The source ``image`` (or a mask of its size) on the canvas at ``placement``, resampled once:
    shrinking averages (``INTER_AREA``), enlarging is Lanczos; only the canvas's pixels are ever
    made, however large the placed photo. ``fill``: ``"replicate"`` edge pixels or ``"zero"``."""
    cw, ch = canvas
    sx, sy = placement.scale_x, placement.scale_y
    src = image
    if sx < 1.0 or sy < 1.0:  # shrink first with area averaging, then place at scale 1
        src = cv2.resize(image, (placement.width, placement.height), interpolation=cv2.INTER_AREA)
        sx, sy = 1.0, 1.0
    matrix = np.float32([[sx, 0, placement.offset_x + 0.5 * (sx - 1)], [0, sy, placement.offset_y + 0.5 * (sy - 1)]])
    border = cv2.BORDER_REPLICATE if fill == "replicate" else cv2.BORDER_CONSTANT
    if fill not in ("replicate", "zero"):
        raise ValueError(f"unknown fill {fill!r}")
    interp = cv2.INTER_LINEAR if (sx, sy) == (1.0, 1.0) else cv2.INTER_LANCZOS4
    out = cv2.warpAffine(np.ascontiguousarray(src), matrix, (cw, ch), flags=interp, borderMode=border, borderValue=0)
    if fill == "zero":  # outside the photo is exactly zero (Lanczos rings at the border otherwise)
        x0, y0, x1, y1 = visible_window(placement, canvas)
        keep = np.zeros((ch, cw), bool)
        keep[y0:y1, x0:x1] = True
        out[~keep] = 0
    return out


def fit_to_canvas(rgb: np.ndarray) -> tuple[np.ndarray, Placement]:
    """Scale an RGB image to fit the 720x1280 canvas, anchored bottom-centre, edges replicated.

    Example::

        canvas, placement = fit_to_canvas(load_portrait("astronaut.png"))  # 512x512 -> 720x720 block
    """
    placement = placement_for(rgb.shape[1], rgb.shape[0])
    return place_on_canvas(scale_block(rgb, placement), placement), placement
