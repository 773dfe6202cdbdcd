"""Persona cache format: content checks, digest, verification, corruption, staleness, status, ids,
preview. The astronaut persona comes from conftest.py (built once per module)."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from PIL import Image
from skimage import data

from newsmotion_engine import cachedir
from newsmotion_engine.errors import CacheCorruptError, CacheMissingError, InvalidIdError
from newsmotion_engine.persona import cache as pcache
from newsmotion_engine.persona import (
    list_persona_ids,
    load_persona,
    persona_problems,
    persona_status,
    write_preview,
)
from newsmotion_engine.persona.build import ensure_persona

H, W = 1280, 720


def test_problems_none_on_valid(astronaut):
    assert persona_problems(astronaut) == []


def test_problems_found(astronaut):
    lm = np.array(astronaut.landmarks)
    lm[0, 0] = np.nan
    assert any("NaN" in p for p in persona_problems(dataclasses.replace(astronaut, landmarks=lm)))
    lm = np.array(astronaut.landmarks)
    lm[0, 2] = 1.5
    assert any("confidence" in p for p in persona_problems(dataclasses.replace(astronaut, landmarks=lm)))
    face = np.full((H, W), 255, np.uint8)
    assert any("outside person_mask" in p for p in persona_problems(dataclasses.replace(astronaut, face_mask=face)))
    empty = np.zeros((H, W), np.uint8)
    problems = persona_problems(dataclasses.replace(astronaut, person_mask=empty))
    assert any("empty" in p for p in problems)
    wrong = np.zeros((10, 10), np.uint8)
    assert any("expected" in p for p in persona_problems(dataclasses.replace(astronaut, face_mask=wrong)))


def test_digest_is_stable_and_tracks_content(own_storage, module_storage):
    cache = load_persona(own_storage, "astronaut")
    assert cache.digest == load_persona(module_storage, "astronaut").digest  # same content, other folder
    meta_path = cache.path / "metadata.json"
    meta = json.loads(meta_path.read_text())
    meta["created_at"] = "2000-01-01T00:00:00+00:00"  # when is not what
    meta_path.write_text(json.dumps(meta))
    assert load_persona(own_storage, "astronaut").digest == cache.digest
    meta["files"]["landmarks.npy"]["sha256"] = "0" * 64
    meta_path.write_text(json.dumps(meta))
    assert load_persona(own_storage, "astronaut").digest != cache.digest


def test_verify_detects_changed_file(own_storage):
    png = own_storage.persona_dir("astronaut") / "portrait.png"
    raw = bytearray(png.read_bytes())
    raw[-20] ^= 0xFF  # same size, different content
    png.write_bytes(bytes(raw))
    load_persona(own_storage, "astronaut")  # cheap checks pass: sizes and headers are intact
    with pytest.raises(CacheCorruptError, match="sha256"):
        load_persona(own_storage, "astronaut", verify=True)


def test_corrupt_detected_and_rebuilt(own_storage, images, leftovers):
    mask = own_storage.persona_dir("astronaut") / "person_mask.npy"
    mask.write_bytes(mask.read_bytes()[:1000])
    status, cache, detail = persona_status(own_storage, "astronaut")
    assert (status, cache) == ("corrupt", None) and "bytes, metadata.json says" in detail
    with pytest.raises(CacheCorruptError):
        load_persona(own_storage, "astronaut")
    cache, rebuilt = ensure_persona(own_storage, "astronaut", image=images["astronaut"])
    assert rebuilt and persona_problems(cache) == []
    assert leftovers(own_storage) == [".astronaut.lock", "astronaut"]


def test_stale_params_and_source(own_storage, images, monkeypatch, tmp_path):
    monkeypatch.setattr(pcache, "PERSONA_VERSION", pcache.PERSONA_VERSION + 1)
    status, cache, detail = persona_status(own_storage, "astronaut")
    assert status == "stale" and cache is not None and "parameters" in detail
    with pytest.raises(cachedir.CacheStaleError):
        load_persona(own_storage, "astronaut", expected_params=pcache.persona_params())
    monkeypatch.undo()
    # A different file under the same id is stale for a loader expecting it.
    other = tmp_path / "astronaut_small.png"
    Image.fromarray(data.astronaut()[::2, ::2]).save(other)
    with pytest.raises(cachedir.CacheStaleError, match="different source"):
        load_persona(own_storage, "astronaut", expected_source=pcache.image_source(other))


def test_source_changed_in_place_is_stale(own_storage, tmp_path):
    src = tmp_path / "anchor.png"
    Image.fromarray(data.astronaut()).save(src)
    meta_path = own_storage.persona_dir("astronaut") / "metadata.json"
    meta = json.loads(meta_path.read_text())
    meta["source_path"] = str(src)
    meta_path.write_text(json.dumps(meta))
    assert persona_status(own_storage, "astronaut")[0] == "valid"
    Image.fromarray(data.astronaut()[:, ::-1]).save(src)  # the user replaced the photo
    status, _, detail = persona_status(own_storage, "astronaut")
    assert status == "stale" and "changed" in detail


def test_kept_source_takes_precedence(own_storage):
    sources = own_storage.persona_sources
    sources.mkdir(parents=True)
    Image.fromarray(data.astronaut()).save(sources / "astronaut.png")  # same pixels and bytes
    assert persona_status(own_storage, "astronaut")[0] == "valid"
    Image.fromarray(data.chelsea()).save(sources / "astronaut.png")
    status, _, detail = persona_status(own_storage, "astronaut")
    assert status == "stale" and str(sources / "astronaut.png") in detail


def test_status_missing(own_storage):
    assert persona_status(own_storage, "nobody") == ("missing", None, "")
    with pytest.raises(CacheMissingError):
        load_persona(own_storage, "nobody")


def test_preview(astronaut, tmp_path):
    out = write_preview(astronaut, tmp_path / "previews" / "astronaut.png")
    img = np.asarray(Image.open(out))
    assert img.shape == (H // 2, 4 * (W // 2), 3)
    # Panel 2 is the matte: black where the canvas fill is.
    assert img[50:200, W // 2 + 50 : W - 50].max() == 0
    assert img[H // 2 - 60, W // 2 + W // 4].min() == 255


@pytest.mark.parametrize("bad_id", ["../etc", "CON", "con", "", "a" * 200, "ñandú", "a/b", ".hidden"])
def test_bad_ids(bad_id, images, storage):
    with pytest.raises(InvalidIdError) as info:
        ensure_persona(storage, bad_id, image=images["astronaut"])
    assert "\n" not in str(info.value) and "persona id" in str(info.value)
    with pytest.raises(InvalidIdError):
        load_persona(storage, bad_id)
    with pytest.raises(InvalidIdError):
        persona_status(storage, bad_id)
    assert not storage.root.exists()


def test_list_ignores_non_persona_entries(own_storage):
    folder = own_storage.persona_root
    (folder / ".astronaut.tmp-abc").mkdir()
    (folder / "Not A Slug").mkdir()
    (folder / "stray.txt").write_text("x")
    assert list_persona_ids(own_storage) == ["astronaut"]


def test_engine_import_does_not_load_mediapipe():
    import subprocess
    import sys

    code = "import sys, newsmotion_engine.persona, newsmotion_engine.bench.persona; print('mediapipe' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
