"""`newsmotion persona add/build/list/show`: happy paths and one-line errors with a non-zero exit."""

import json

import numpy as np
import pytest

from .conftest import run


def test_persona_add_list_show(capsys, astronaut_png, tmp_path, storage):
    code, out, _ = run(capsys, "persona", "add", str(astronaut_png), "--id", "astro")
    assert code == 0 and "built" in out
    assert storage.find_persona_source("astro") is not None
    code, out, _ = run(capsys, "persona", "list")
    assert code == 0 and "astro" in out and "valid" in out
    preview = tmp_path / "p.png"
    code, out, _ = run(capsys, "persona", "show", "astro", "--out", str(preview))
    assert code == 0 and preview.stat().st_size > 1000
    code, _, err = run(capsys, "persona", "add", str(astronaut_png), "--id", "astro")
    assert code == 0


@pytest.mark.parametrize("persona_id", ["../etc", "CON", "", "x" * 200, "ünï"])
def test_persona_add_bad_ids(capsys, astronaut_png, persona_id, storage):
    code, _, err = run(capsys, "persona", "add", str(astronaut_png), "--id", persona_id)
    assert code == 1 and err.startswith("error: invalid persona id") and err.count("\n") == 1
    assert not storage.persona_root.exists() or not any(storage.persona_root.iterdir())


def test_persona_add_not_an_image(capsys, tmp_path, storage):
    fake = tmp_path / "fake.png"
    fake.write_text("hello")
    code, _, err = run(capsys, "persona", "add", str(fake), "--id", "fake")
    assert code == 1 and "fake.png" in err and err.count("\n") == 1
    assert not storage.persona_dir("fake").exists() and storage.find_persona_source("fake") is None


def test_persona_build_from_kept_sources(capsys, astronaut_png, storage):
    code, _, err = run(capsys, "persona", "build", "astro")
    assert code == 1 and err.startswith("error: unknown persona 'astro'")
    storage.persona_sources.mkdir(parents=True)
    (storage.persona_sources / "astro.png").write_bytes(astronaut_png.read_bytes())
    code, out, _ = run(capsys, "persona", "build", "--all")
    assert code == 0 and "astro" in out and "built" in out
    code, out, _ = run(capsys, "persona", "build", "astro")
    assert code == 0 and "current" in out


def test_persona_add_headshot_and_sideways_say_what_happened(capfd, tmp_path, storage):
    """Both stdout and the process's stderr (fd level: mediapipe writes from C++) are checked."""
    from PIL import Image

    from newsmotion_engine.samples import astronaut_rgb

    rgb = astronaut_rgb()
    Image.fromarray(np.ascontiguousarray(rgb[:230])).save(tmp_path / "head.png")
    Image.fromarray(np.ascontiguousarray(np.rot90(rgb, -1))).save(tmp_path / "turned.jpg")
    code, out, err = run(capfd, "persona", "add", str(tmp_path / "head.png"), "--id", "head")
    assert code == 0 and err == ""
    assert "outside the photo (not visible): " in out and "left_hip" in out
    code, out, err = run(capfd, "persona", "add", str(tmp_path / "turned.jpg"), "--id", "turned")
    assert code == 0 and err == ""
    assert "the photo was rotated 90° clockwise: turned upright" in out
    code, out, _ = run(capfd, "caches", "--json")
    rows = {r["id"]: r for r in json.loads(out)}
    assert rows["head"]["status"] == "valid" and rows["turned"]["status"] == "valid"
    # `persona build` (from the kept portraits) reports the same in its table.
    code, out, err = run(capfd, "persona", "build", "head", "turned", "--force")
    assert code == 0 and err == ""
    head, turned = (next(line for line in out.splitlines() if f" {i} " in line) for i in ("head", "turned"))
    assert "outside the photo (not visible): " in head and "left_hip" in head and "built" in head
    assert "the photo was rotated 90° clockwise: turned upright" in turned


def test_persona_add_of_a_portrait_without_a_person_installs_nothing(capfd, tmp_path, storage):
    from PIL import Image
    from skimage import data

    Image.fromarray(data.chelsea()).save(tmp_path / "cat.png")
    code, _, err = run(capfd, "persona", "add", str(tmp_path / "cat.png"), "--id", "cat")
    assert code == 1 and err.startswith("error: ") and "cat.png: no person detected" in err
    assert err.count("\n") == 1  # one line: no mediapipe chatter around it
    assert storage.find_persona_source("cat") is None and not storage.persona_dir("cat").exists()
