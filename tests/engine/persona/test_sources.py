"""Persona source portraits: installed with the umask's mode, rejected portraits moved aside with
their reason, and `persona add` of a bad portrait installs nothing."""

from __future__ import annotations

import os
import stat

import numpy as np
import pytest
from PIL import Image

from newsmotion_engine.errors import BadInputError, NewsmotionError
from newsmotion_engine.persona.sources import REASON_SUFFIX, add_persona, install_source, reject_source, rejection_reason


@pytest.fixture()
def umask_022():
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def _mode(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _portrait(path, value: int = 128):
    Image.fromarray(np.full((80, 80, 3), value, np.uint8)).save(path)
    return path


def test_install_source_respects_the_umask(tmp_path, storage, umask_022):
    target = install_source(storage, _portrait(tmp_path / "anna.png"), "anna")
    assert target == storage.persona_sources / "anna.png"
    assert _mode(target) == 0o644 and _mode(target.parent) == 0o755
    assert not [p for p in target.parent.iterdir() if p.name.startswith(".")]  # no temp file left


def test_install_source_under_a_stricter_umask(tmp_path, storage):
    old = os.umask(0o077)
    try:
        target = install_source(storage, _portrait(tmp_path / "anna.png"), "anna")
    finally:
        os.umask(old)
    assert _mode(target) == 0o600


def test_reject_source_moves_the_file_and_writes_the_reason(tmp_path, storage, umask_022):
    source = install_source(storage, _portrait(tmp_path / "anna.png"), "anna")
    moved = reject_source(storage, "anna", "no person detected (mediapipe holistic found no body or face)")
    assert moved == storage.persona_rejected / "anna.png"
    assert not source.exists() and storage.find_persona_source("anna") is None
    assert moved.read_bytes() == (tmp_path / "anna.png").read_bytes()
    reason = storage.persona_rejected / f"anna.png{REASON_SUFFIX}"
    text = reason.read_text()
    assert text.startswith("no person detected (mediapipe holistic found no body or face)\n")
    assert "persona anna" in text
    assert _mode(reason) == 0o644 and _mode(moved) == 0o644
    assert sorted(p.name for p in storage.persona_rejected.iterdir()) == ["anna.png", "anna.png.reason.txt"]
    assert rejection_reason(moved) == "no person detected (mediapipe holistic found no body or face)"
    assert rejection_reason(tmp_path / "never-rejected.png") == ""


def test_reject_source_never_overwrites_an_earlier_rejection(tmp_path, storage):
    first = _portrait(tmp_path / "first.png", 10)
    second = _portrait(tmp_path / "second.png", 200)
    install_source(storage, first, "anna")
    reject_source(storage, "anna", "first reason")
    install_source(storage, second, "anna")
    moved = reject_source(storage, "anna", "second reason")
    assert moved.name == "anna-2.png"
    assert (storage.persona_rejected / "anna.png").read_bytes() == first.read_bytes()
    assert (storage.persona_rejected / "anna.png.reason.txt").read_text().startswith("first reason")
    assert moved.read_bytes() == second.read_bytes()
    assert (storage.persona_rejected / "anna-2.png.reason.txt").read_text().startswith("second reason")


def test_reject_source_skips_a_name_whose_reason_is_left_over(tmp_path, storage):
    storage.persona_rejected.mkdir(parents=True)
    (storage.persona_rejected / "anna.png.reason.txt").write_text("an orphan reason")
    install_source(storage, _portrait(tmp_path / "anna.png"), "anna")
    assert reject_source(storage, "anna", "why").name == "anna-2.png"
    assert (storage.persona_rejected / "anna.png.reason.txt").read_text() == "an orphan reason"


def test_reject_source_without_a_source_is_a_clear_error(storage):
    with pytest.raises(NewsmotionError, match="persona 'ghost' has no source portrait"):
        reject_source(storage, "ghost", "why")
    assert not storage.persona_rejected.exists()


def test_add_persona_of_a_bad_portrait_installs_nothing(tmp_path, storage):
    from skimage import data

    cat = tmp_path / "cat.png"
    Image.fromarray(data.chelsea()).save(cat)
    with pytest.raises(BadInputError, match="no person detected"):
        add_persona(storage, cat, "cat")
    assert storage.find_persona_source("cat") is None
    assert not storage.persona_dir("cat").exists()
    assert not storage.persona_rejected.exists()  # nothing was installed, so nothing to reject
