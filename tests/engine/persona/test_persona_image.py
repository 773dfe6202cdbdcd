"""Portrait loading and canvas placement: every input flavour comes back upright 8-bit RGB; every
unusable file is refused with one line naming it. No mediapipe here (fast)."""

from __future__ import annotations

import io
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from skimage import data

from newsmotion_engine.errors import BadInputError
from newsmotion_engine.persona import image as pimage
from newsmotion_engine.persona.image import (
    CANVAS_HEIGHT,
    CANVAS_WIDTH,
    CHROMA_GREEN,
    PIXEL_LIMIT,
    fit_to_canvas,
    load_portrait,
    read_portrait,
)


def _png_header_only(path: Path, width: int, height: int) -> Path:
    """A PNG whose header claims ``width x height`` but holds no pixel data: PIL reports the size
    without decoding, so a refusal must come from the header."""

    def chunk(kind: bytes, payload: bytes) -> bytes:
        return struct.pack(">I", len(payload)) + kind + payload + struct.pack(">I", zlib.crc32(kind + payload))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IEND", b""))
    return path


def _one_line(exc: BadInputError, path: Path) -> str:
    message = str(exc)
    assert "\n" not in message and str(path) in message
    return message


def test_rgb_png_roundtrip(tmp_path):
    rgb = data.astronaut()[::4, ::4]
    Image.fromarray(rgb).save(tmp_path / "a.png")
    out = load_portrait(tmp_path / "a.png")
    assert out.dtype == np.uint8 and out.shape == rgb.shape
    np.testing.assert_array_equal(out, rgb)


def test_webp_loads(tmp_path):
    rgb = data.astronaut()[::4, ::4]
    Image.fromarray(rgb).save(tmp_path / "a.webp", lossless=True)
    np.testing.assert_array_equal(load_portrait(tmp_path / "a.webp"), rgb)


def test_grayscale_becomes_rgb(tmp_path):
    gray = data.camera()[::4, ::4]
    Image.fromarray(gray).save(tmp_path / "g.png")
    out = load_portrait(tmp_path / "g.png")
    assert out.shape == (*gray.shape, 3) and out.dtype == np.uint8
    for c in range(3):
        np.testing.assert_array_equal(out[..., c], gray)


def test_16bit_gray_is_scaled_not_clipped(tmp_path):
    gray8 = data.camera()[::4, ::4]
    # +100 stays inside the same 8-bit level (and 255 * 257 is already the top of the range)
    gray16 = gray8.astype(np.uint16) * 257 + np.where(gray8 < 255, 100, 0).astype(np.uint16)
    Image.fromarray(gray16).save(tmp_path / "g16.png")
    assert Image.open(tmp_path / "g16.png").mode.startswith("I")
    out = load_portrait(tmp_path / "g16.png")
    assert out.dtype == np.uint8
    np.testing.assert_array_equal(out[..., 0], gray8)  # clipping would give 255 almost everywhere


def test_16bit_rgb(tmp_path):
    import cv2

    rgb8 = data.astronaut()[::4, ::4]
    rgb16 = rgb8.astype(np.uint16) * 257
    cv2.imwrite(str(tmp_path / "c16.png"), rgb16[..., ::-1])
    out = load_portrait(tmp_path / "c16.png")
    assert out.dtype == np.uint8 and out.shape == rgb8.shape
    assert np.abs(out.astype(int) - rgb8).max() <= 1


def test_palette_image(tmp_path):
    rgb = data.astronaut()[::4, ::4]
    pal = Image.fromarray(rgb).quantize(colors=64)
    pal.save(tmp_path / "p.png")
    np.testing.assert_array_equal(load_portrait(tmp_path / "p.png"), np.asarray(pal.convert("RGB")))


def test_rgba_cutout_composited_on_green_and_alpha_kept(tmp_path):
    rgb = data.astronaut()[::4, ::4]
    alpha = np.full(rgb.shape[:2], 255, np.uint8)
    alpha[:, : rgb.shape[1] // 2] = 0
    Image.fromarray(np.dstack([rgb, alpha])).save(tmp_path / "cut.png")
    portrait = read_portrait(tmp_path / "cut.png")
    assert portrait.alpha is not None and portrait.info["alpha_matte"]
    np.testing.assert_array_equal(portrait.alpha, alpha)
    assert portrait.rgb.shape == rgb.shape
    np.testing.assert_array_equal(portrait.rgb[:, -1], rgb[:, -1])
    assert (portrait.rgb[:, 0] == np.array(CHROMA_GREEN, np.uint8)).all()


def test_opaque_alpha_is_ignored(tmp_path):
    rgb = data.astronaut()[::4, ::4]
    Image.fromarray(np.dstack([rgb, np.full(rgb.shape[:2], 255, np.uint8)])).save(tmp_path / "o.png")
    portrait = read_portrait(tmp_path / "o.png")
    assert portrait.alpha is None
    np.testing.assert_array_equal(portrait.rgb, rgb)


def test_exif_rotation_applied(tmp_path):
    # Stored 120 wide x 80 high with a red top-left corner; orientation 6 = display rotated 90° CW,
    # so the upright image is 80 wide x 120 high with the red corner at the top right.
    stored = np.full((80, 120, 3), 200, np.uint8)
    stored[:30, :30] = (255, 0, 0)
    img = Image.fromarray(stored)
    exif = img.getexif()
    exif[0x0112] = 6
    img.save(tmp_path / "rot.jpg", exif=exif.tobytes(), quality=95)
    portrait = read_portrait(tmp_path / "rot.jpg")
    out = portrait.rgb
    assert out.shape == (120, 80, 3)
    assert portrait.info["exif_orientation"] == 6
    assert out[10, -10, 0] > 200 and out[10, -10, 1] < 60  # red, top right
    assert out[10, 10, 1] > 150  # grey, top left


def test_not_an_image(tmp_path):
    path = tmp_path / "notes.png"
    path.write_text("this is a text file, renamed\n")
    with pytest.raises(BadInputError) as info:
        load_portrait(path)
    assert "not an image" in _one_line(info.value, path)


def test_missing_file(tmp_path):
    with pytest.raises(BadInputError, match="file not found"):
        load_portrait(tmp_path / "nope.jpg")


def test_truncated_jpeg(tmp_path):
    buf = io.BytesIO()
    Image.fromarray(data.astronaut()).save(buf, format="JPEG", quality=90)
    path = tmp_path / "cut.jpg"
    path.write_bytes(buf.getvalue()[: len(buf.getvalue()) // 2])
    with pytest.raises(BadInputError) as info:
        load_portrait(path)
    assert "truncated" in _one_line(info.value, path)


def test_one_pixel_image(tmp_path):
    path = tmp_path / "dot.png"
    Image.new("RGB", (1, 1), (10, 20, 30)).save(path)
    with pytest.raises(BadInputError) as info:
        load_portrait(path)
    assert "too small" in _one_line(info.value, path) and "1x1" in str(info.value)


def test_huge_image_refused_from_header(tmp_path, monkeypatch):
    path = _png_header_only(tmp_path / "huge.png", 20000, 20000)
    assert path.stat().st_size < 100

    def no_decoding(self, *args, **kwargs):
        raise AssertionError("pixels were decoded")

    monkeypatch.setattr(Image.Image, "load", no_decoding)
    with pytest.raises(BadInputError) as info:
        load_portrait(path)
    assert "too large" in _one_line(info.value, path)


def test_pixel_limit_is_ours(tmp_path, monkeypatch):
    # 8000x8000 = 64 MP: under PIL's own bomb limits, over PIXEL_LIMIT.
    assert 8000 * 8000 > PIXEL_LIMIT and 8000 * 8000 < Image.MAX_IMAGE_PIXELS
    path = _png_header_only(tmp_path / "big.png", 8000, 8000)
    monkeypatch.setattr(Image.Image, "load", lambda self: (_ for _ in ()).throw(AssertionError("decoded")))
    with pytest.raises(BadInputError) as info:
        load_portrait(path)
    assert "8000x8000" in _one_line(info.value, path) and f"{PIXEL_LIMIT:,}" in str(info.value)


def test_unsupported_format(tmp_path):
    path = tmp_path / "a.gif"
    Image.fromarray(data.astronaut()[::4, ::4]).save(path)
    with pytest.raises(BadInputError, match="unsupported image format GIF"):
        load_portrait(path)


@pytest.mark.parametrize(
    ("size", "block", "offset"),
    [
        ((512, 512), (720, 720), (0, 560)),  # square: full width, bottom
        ((720, 1280), (720, 1280), (0, 0)),  # exact canvas
        ((1080, 1920), (720, 1280), (0, 0)),  # 9:16, shrunk
        ((1000, 1000 * 4), (320, 1280), (200, 0)),  # very tall: centred horizontally
        ((1920, 1080), (720, 405), (0, 875)),  # landscape: bottom
    ],
)
def test_fit_to_canvas_bottom_centre(size, block, offset):
    w, h = size
    rng = np.random.default_rng(0)
    src = rng.integers(0, 255, (h, w, 3), dtype=np.uint8)
    canvas, placement = fit_to_canvas(src)
    assert canvas.shape == (CANVAS_HEIGHT, CANVAS_WIDTH, 3) and canvas.dtype == np.uint8
    assert (placement.width, placement.height) == block
    assert (placement.offset_x, placement.offset_y) == offset
    assert placement.offset_y + placement.height == CANVAS_HEIGHT
    # The fill replicates the block's edge pixels.
    if placement.offset_y > 0:
        np.testing.assert_array_equal(canvas[0, placement.offset_x : placement.offset_x + placement.width],
                                      canvas[placement.offset_y, placement.offset_x : placement.offset_x + placement.width])
    # The transform maps the source's corners onto the block's.
    assert round(w * placement.scale_x) == placement.width and round(h * placement.scale_y) == placement.height


def test_placement_matches_pixels():
    src = np.zeros((100, 100, 3), np.uint8)
    src[40:60, 40:60] = 255
    canvas, p = fit_to_canvas(src)
    ys, xs = np.nonzero(canvas[..., 0] > 127)
    cy, cx = ys.mean(), xs.mean()
    assert abs(cx - (50 * p.scale_x + p.offset_x)) < 2 and abs(cy - (50 * p.scale_y + p.offset_y)) < 2


def test_pixel_limit_constant():
    assert pimage.PIXEL_LIMIT == PIXEL_LIMIT and 10_000_000 <= PIXEL_LIMIT <= 100_000_000
