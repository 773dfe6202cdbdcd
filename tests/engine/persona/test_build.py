"""Persona build: the selfie, chroma and alpha mattes, reuse of a current cache, the kept source,
and bad input (one clear line, nothing left behind, existing caches untouched). The astronaut
persona comes from conftest.py (built once per module)."""

from __future__ import annotations

import io
import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from skimage import data

from newsmotion_engine.errors import BadInputError, NewsmotionError
from newsmotion_engine.persona import PersonaCache, list_persona_ids, persona_problems, persona_status
from newsmotion_engine.persona import cache as pcache
from newsmotion_engine.persona.build import ensure_persona

H, W = 1280, 720


# --- the astronaut: selfie segmentation path -----------------------------------------------------


def test_astronaut_selfie_path(astronaut):
    meta = astronaut.metadata
    assert astronaut.matte_method == "selfie-segmentation"
    assert {"body", "face"} <= set(astronaut.visible_parts)
    assert "feet" not in astronaut.visible_parts
    assert meta["canvas"] == {"width": W, "height": H}
    assert meta["placement"] == {"scale_x": 1.40625, "scale_y": 1.40625, "offset_x": 0, "offset_y": 560,
                                 "width": 720, "height": 720}
    assert meta["source"]["kind"] == "image" and meta["source_path"].endswith("astronaut.png")
    assert meta["source_size"] == {"width": 512, "height": 512}
    assert set(meta["tools"]) == {"mediapipe", "opencv", "numpy", "pillow"}
    assert meta["params"] == pcache.persona_params("as-is")
    assert meta["framing"]["mode"] == "as-is"
    assert meta["params"]["version"] == pcache.PERSONA_VERSION


def test_astronaut_arrays(astronaut):
    assert isinstance(astronaut.portrait, np.memmap)
    assert astronaut.portrait.shape == (H, W, 3) and astronaut.portrait.dtype == np.uint8
    assert astronaut.person_mask.shape == (H, W) and astronaut.person_mask.dtype == np.uint8
    assert astronaut.face_mask.shape == (H, W) and astronaut.face_mask.dtype == np.uint8
    assert astronaut.landmarks.shape == (133, 3) and astronaut.landmarks.dtype == np.float32
    person = np.asarray(astronaut.person_mask)
    # The fill above the 720x720 block is not person; the person covers a sensible share of it.
    assert person[:560].max() == 0
    assert 0.3 < person[560:].mean() / 255 < 0.9
    # The png holds the same pixels as the npy.
    png = np.asarray(Image.open(astronaut.path / "portrait.png").convert("RGB"))
    np.testing.assert_array_equal(png, np.asarray(astronaut.portrait))
    # The block is the astronaut scaled up: compare against a plain resize.
    import cv2

    # (Semi-transparent edge pixels carry their estimated foreground colour instead: left out.)
    ref = cv2.resize(data.astronaut(), (720, 720), interpolation=cv2.INTER_LANCZOS4)
    untouched = np.isin(np.asarray(astronaut.person_mask[560:]), (0, 255))
    assert np.abs(np.asarray(astronaut.portrait[560:], np.int16) - ref)[untouched].mean() < 1.0


def test_astronaut_landmarks_on_canvas(astronaut):
    lm = np.asarray(astronaut.landmarks)
    nose = lm[0]
    assert nose[2] > 0.5
    x, y = int(nose[0] * W), int(nose[1] * H)
    assert 560 < y < H  # inside the placed block
    assert astronaut.face_mask[y, x] > 200 and astronaut.person_mask[y, x] > 200
    face = lm[23:91]
    assert (face[:, 2] > 0).all() and (face[:, 1] * H > 560).all()
    absent = lm[:, 2] == 0
    assert (lm[absent, :2] == 0).all()


def test_face_mask_covers_face_and_hair_inside_person(astronaut):
    face = np.asarray(astronaut.face_mask, np.int16)
    person = np.asarray(astronaut.person_mask, np.int16)
    assert (face <= person + 1).all()
    coverage = (face > 127).mean()
    assert 0.01 < coverage < 0.1
    lm = np.asarray(astronaut.landmarks)
    brow_top = (lm[23 + 17 : 23 + 27, 1] * H).min()
    chin = lm[23 + 8, 1] * H
    rows = np.nonzero((face > 127).any(axis=1))[0]
    # Extends well above the brows (forehead + hair), down to about the chin.
    assert rows.min() < brow_top - 0.4 * (chin - brow_top)
    assert abs(rows.max() - chin) < 0.25 * (chin - brow_top)


# --- reuse, the kept source, backend sub-caches --------------------------------------------------


def test_reuse_when_current(module_storage, images):
    before = (module_storage.persona_dir("astronaut") / "metadata.json").read_bytes()
    cache, built = ensure_persona(module_storage, "astronaut", image=images["astronaut"])
    assert not built
    assert (cache.path / "metadata.json").read_bytes() == before
    assert persona_status(module_storage, "astronaut")[0] == "valid"
    assert list_persona_ids(module_storage) == ["astronaut"]


def test_ensure_from_the_kept_source(storage, images):
    with pytest.raises(NewsmotionError, match="unknown persona 'anchor': no source portrait in .*persona add IMAGE --id anchor"):
        ensure_persona(storage, "anchor")
    storage.persona_sources.mkdir(parents=True)
    shutil.copy(images["astronaut"], storage.persona_sources / "anchor.png")
    cache, built = ensure_persona(storage, "anchor")
    assert built and cache.metadata["source"] == pcache.image_source(images["astronaut"])
    assert ensure_persona(storage, "anchor")[1] is False


def test_force_rebuild_keeps_backend_subcache(own_storage, images):
    sub = own_storage.persona_dir("astronaut") / "wan-animate/720x1280"
    sub.mkdir(parents=True)
    (sub / "ref_latents.safetensors").write_bytes(b"x" * 64)
    cache, rebuilt = ensure_persona(own_storage, "astronaut", image=images["astronaut"], force=True)
    assert rebuilt
    assert (cache.path / "wan-animate/720x1280/ref_latents.safetensors").read_bytes() == b"x" * 64
    assert persona_status(own_storage, "astronaut")[0] == "valid"


# --- chroma green and alpha cutout ---------------------------------------------------------------


def _composite_on_green(astronaut: PersonaCache, tmp_path: Path) -> tuple[Path, np.ndarray]:
    """The astronaut's own selfie matte composited onto a green screen, as a taller waist-up JPEG."""
    matte = np.asarray(astronaut.person_mask[560:], np.float32)[..., None] / 255.0
    green = np.array([20, 190, 70], np.float32)
    block = (np.asarray(astronaut.portrait[560:], np.float32) * matte + green * (1 - matte)).astype(np.uint8)
    image = np.concatenate([np.tile(green.astype(np.uint8), (300, 720, 1)), block])
    path = tmp_path / "green_anchor.jpg"
    Image.fromarray(image).save(path, quality=93)
    truth = np.zeros((H, W), np.float32)
    truth[560:] = matte[..., 0]
    return path, truth


def test_green_screen_takes_chroma_path(astronaut, tmp_path, storage):
    path, truth = _composite_on_green(astronaut, tmp_path)
    cache, rebuilt = ensure_persona(storage, "green-anchor", image=path, framing="as-is")
    assert rebuilt and cache.matte_method == "chroma"
    assert cache.metadata["placement"]["offset_y"] == 260 and cache.metadata["placement"]["scale_x"] == 1.0
    assert cache.metadata["matte"]["green_border"] > 0.9
    mask = np.asarray(cache.person_mask, np.float32) / 255.0
    iou = np.minimum(mask, truth).sum() / np.maximum(mask, truth).sum()
    assert iou > 0.93
    assert {"body", "face"} <= set(cache.visible_parts)
    # Spill suppressed on the edge: semi-transparent pixels carry no green excess.
    rgb = np.asarray(cache.portrait, np.int16)
    edge = (mask > 0.05) & (mask < 0.95)
    assert edge.sum() > 500
    excess = rgb[..., 1] - np.maximum(rgb[..., 0], rgb[..., 2])
    assert excess[edge].max() <= 1
    # ... while the background stays green and the interior keeps its colours (orange suit).
    assert excess[100, 360] > 80
    assert persona_problems(cache) == []


def test_rgba_cutout_uses_its_alpha(astronaut, tmp_path, storage):
    import cv2

    alpha = np.asarray(astronaut.person_mask[560:])
    rgb = np.asarray(astronaut.portrait[560:])
    small = cv2.resize(np.dstack([rgb, alpha]), (360, 360), interpolation=cv2.INTER_AREA)
    path = tmp_path / "cutout.png"
    Image.fromarray(small, "RGBA").save(path)
    cache, _ = ensure_persona(storage, "cutout", image=path, framing="as-is")
    assert cache.matte_method == "alpha"
    mask = np.asarray(cache.person_mask, np.float32) / 255.0
    truth = np.asarray(astronaut.person_mask, np.float32) / 255.0
    assert np.minimum(mask, truth).sum() / np.maximum(mask, truth).sum() > 0.95
    assert cache.metadata["source_image"]["alpha_matte"] is True


# --- bad input -----------------------------------------------------------------------------------


def _bad_files(folder: Path) -> dict[str, tuple[Path, str]]:
    folder.mkdir(parents=True, exist_ok=True)
    text = folder / "notes.png"
    text.write_text("not really a picture\n")
    buf = io.BytesIO()
    Image.fromarray(data.astronaut()).save(buf, format="JPEG")
    truncated = folder / "cut.jpg"
    truncated.write_bytes(buf.getvalue()[: len(buf.getvalue()) // 3])
    dot = folder / "dot.png"
    Image.new("RGB", (1, 1)).save(dot)
    import struct
    import zlib

    def chunk(kind: bytes, payload: bytes) -> bytes:
        return struct.pack(">I", len(payload)) + kind + payload + struct.pack(">I", zlib.crc32(kind + payload))

    huge = folder / "huge.png"
    huge.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 20000, 20000, 8, 2, 0, 0, 0))
                     + chunk(b"IEND", b""))
    return {
        "text": (text, "not an image"),
        "truncated": (truncated, "truncated"),
        "one-pixel": (dot, "too small"),
        "huge": (huge, "too large"),
    }


@pytest.mark.parametrize("kind", ["text", "truncated", "one-pixel", "huge"])
def test_bad_file_leaves_nothing(kind, tmp_path, storage, leftovers):
    path, problem = _bad_files(tmp_path / "in")[kind]
    with pytest.raises(BadInputError) as info:
        ensure_persona(storage, "jane", image=path)
    message = str(info.value)
    assert problem in message and str(path) in message and "\n" not in message
    assert leftovers(storage) == []


@pytest.mark.parametrize("kind", ["text", "truncated", "one-pixel", "huge"])
def test_bad_file_keeps_existing_cache(kind, own_storage, tmp_path, leftovers):
    path, problem = _bad_files(tmp_path / "in")[kind]
    before = {p.name: p.read_bytes() for p in own_storage.persona_dir("astronaut").iterdir()}
    with pytest.raises(BadInputError, match=problem):
        ensure_persona(own_storage, "astronaut", image=path, force=True)
    after = {p.name: p.read_bytes() for p in own_storage.persona_dir("astronaut").iterdir()}
    assert after == before
    assert leftovers(own_storage) == ["astronaut"]
    assert persona_status(own_storage, "astronaut")[0] == "valid"


@pytest.mark.parametrize("name", ["coffee", "chelsea"])
def test_no_person(own_storage, images, name, leftovers):
    with pytest.raises(BadInputError) as info:
        ensure_persona(own_storage, name, image=images[name])
    assert "no person detected" in str(info.value) and str(images[name]) in str(info.value)
    with pytest.raises(BadInputError, match="no person detected"):
        ensure_persona(own_storage, "astronaut", image=images["coffee"], force=True)  # existing cache untouched
    assert leftovers(own_storage) == ["astronaut"]
    assert persona_status(own_storage, "astronaut")[0] == "valid"
