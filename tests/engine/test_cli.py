"""The `newsmotion` command: happy paths and one-line errors with a non-zero exit."""

import json
import os
import stat

import numpy as np
import pytest

from newsmotion_engine.cli import main


def run(capsys, *argv):
    with pytest.raises(SystemExit) as exit_info:
        main(list(argv))
    out, err = capsys.readouterr()
    return exit_info.value.code, out, err


def test_loops_list(capsys):
    code, out, _ = run(capsys, "loops", "list")
    assert code == 0 and "breaking_alert" in out and "signoff" in out


def test_guidance_build_reuses_then_forces(capsys):
    code, out, _ = run(capsys, "guidance", "build", "nod", "welcome")
    assert code == 0 and out.count("built") == 2
    code, out, _ = run(capsys, "guidance", "build", "nod")
    assert code == 0 and "current" in out
    code, out, _ = run(capsys, "guidance", "build", "nod", "--force")
    assert code == 0 and "built" in out


def test_caches_json_reports_status(capsys, storage):
    run(capsys, "guidance", "build", "nod")
    (storage.guidance_dir("welcome")).mkdir(parents=True)  # a cache dir without metadata
    code, out, _ = run(capsys, "caches", "--json")
    rows = {r["id"]: r for r in json.loads(out)}
    assert code == 0
    assert rows["nod"]["status"] == "valid" and rows["nod"]["frames"] == 120 and rows["nod"]["bytes"] > 0
    assert rows["welcome"]["status"] == "corrupt" and rows["signoff"]["status"] == "missing"


def test_stale_cache_is_reported_then_rebuilt(capsys, storage):
    run(capsys, "guidance", "build", "nod")
    meta_path = storage.guidance_dir("nod") / "metadata.json"
    meta = json.loads(meta_path.read_text())
    meta["params"]["palette_version"] = "0.0.0-old"
    meta_path.write_text(json.dumps(meta))
    _, out, _ = run(capsys, "caches", "--json")
    assert {r["id"]: r["status"] for r in json.loads(out)}["nod"] == "stale"
    code, out, _ = run(capsys, "guidance", "build", "nod")
    assert code == 0 and "built" in out


@pytest.mark.parametrize("loop_id", ["../x", "A B", ""])
def test_bad_loop_ids(capsys, loop_id, storage):
    code, out, err = run(capsys, "guidance", "build", loop_id)
    assert code == 1 and err.startswith("error: invalid loop id") and err.count("\n") == 1
    assert not storage.guidance_root.exists() or not any(storage.guidance_root.iterdir())


def test_extract_rejects_non_video_and_leaves_nothing(capsys, tmp_path, storage):
    fake = tmp_path / "fake.mp4"
    fake.write_text("not a video at all")
    code, _, err = run(capsys, "guidance", "extract", str(fake), "--loop-id", "fake_loop")
    assert code == 1 and "fake.mp4" in err and err.count("\n") == 1
    assert not storage.guidance_dir("fake_loop").exists()
    assert not storage.driving_dir.exists() or not any(storage.driving_dir.iterdir())


def test_extract_missing_file_and_canonical_id(capsys, tmp_path):
    code, _, err = run(capsys, "guidance", "extract", str(tmp_path / "nope.mp4"), "--loop-id", "x1")
    assert code == 1 and "nope.mp4: driving video not found" in err
    code, _, err = run(capsys, "guidance", "extract", str(tmp_path / "nope.mp4"), "--loop-id", "nod")
    assert code == 1 and "canonical" in err


def test_corrupt_cache_files_are_typed_errors(capsys, storage):
    from newsmotion_engine.errors import CacheCorruptError
    from newsmotion_engine.guidance.cache import load_guidance

    run(capsys, "guidance", "build", "nod")
    path = storage.guidance_dir("nod") / "keypoints.npy"
    np.save(path, np.zeros((120, 133, 3), np.float64))
    with pytest.raises(CacheCorruptError, match="keypoints.npy"):
        load_guidance(storage, "nod")
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(CacheCorruptError, match="truncated"):
        load_guidance(storage, "nod")


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


def test_extract_custom_loop_records_its_frame(capfd, tmp_path, storage):
    from newsmotion_engine.guidance.cache import guidance_status, load_guidance
    from newsmotion_engine.samples import write_moving_photo_video

    video = tmp_path / "take.mp4"
    write_moving_photo_video(video, frames=12, width=640, height=360)
    old_umask = os.umask(0o022)
    try:
        code, out, err = run(capfd, "guidance", "extract", str(video), "--loop-id", "weather_point")
    finally:
        os.umask(old_umask)
    assert code == 0
    assert err == ""  # mediapipe's native start-up lines are filtered (fd-level capture)
    # The kept driving video is readable by a Dagster daemon running as another user.
    assert stat.S_IMODE((storage.driving_dir / "weather_point.mp4").stat().st_mode) == 0o644
    cache = load_guidance(storage, "weather_point")
    assert (cache.width, cache.height, cache.frames, cache.source_kind) == (640, 360, 12, "video")
    assert (storage.driving_dir / "weather_point.mp4").read_bytes() == video.read_bytes()
    assert guidance_status(storage, "weather_point")[0] == "valid"


def test_caches_ignores_stray_folders(capsys, storage):
    (storage.guidance_root / "Not A Slug").mkdir(parents=True)
    code, out, _ = run(capsys, "caches", "--json")
    assert code == 0 and "Not A Slug" not in out


def test_render_builds_missing_caches_as_steps_then_skips_unchanged(capsys, astronaut_png, storage):
    code, _, _ = run(capsys, "persona", "add", str(astronaut_png), "--id", "astro")
    assert code == 0
    args = ("render", "--persona", "astro", "--loop", "nod", "--width", "180", "--height", "320")
    code, out, err = run(capsys, *args)
    assert code == 0, err
    assert "building guidance cache nod" in out and "building persona cache" not in out  # the persona was current
    assert "120 frames 180x320 @ 30 fps" in out
    mp4 = storage.render_path("astro", "nod", "warp")
    stamp = mp4.stat().st_mtime_ns
    code, out, _ = run(capsys, *args)
    assert code == 0 and "building" not in out and "not rendered again" in out and mp4.stat().st_mtime_ns == stamp
    code, out, _ = run(capsys, *args, "--force")
    assert code == 0 and "120 frames" in out and mp4.stat().st_mtime_ns != stamp


def test_persona_build_from_kept_sources(capsys, astronaut_png, storage):
    code, _, err = run(capsys, "persona", "build", "astro")
    assert code == 1 and err.startswith("error: unknown persona 'astro'")
    storage.persona_sources.mkdir(parents=True)
    (storage.persona_sources / "astro.png").write_bytes(astronaut_png.read_bytes())
    code, out, _ = run(capsys, "persona", "build", "--all")
    assert code == 0 and "astro" in out and "built" in out
    code, out, _ = run(capsys, "persona", "build", "astro")
    assert code == 0 and "current" in out


def test_scorecard_warns_about_an_unreadable_record_and_keeps_the_rest(capsys, astronaut_png, storage, tmp_path, monkeypatch):
    monkeypatch.setenv("NEWSMOTION_BENCH_RESULTS", str(tmp_path / "no-results"))
    run(capsys, "persona", "add", str(astronaut_png), "--id", "astro")
    run(capsys, "render", "--persona", "astro", "--loop", "nod", "--width", "180", "--height", "320")
    old = storage.render_path("astro", "welcome", "warp")
    old.parent.mkdir(parents=True)
    old.write_bytes(b"an mp4")
    old.with_suffix(".json").write_text(json.dumps({"backend": "warp", "frames": 3}))  # an older newsmotion's record
    code, out, _ = run(capsys, "scorecard")
    assert code == 0 and "1 renders" in out
    assert "warning" in out and "welcome" in out and "schema_version" in out


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


def test_tables_are_complete_when_piped(astronaut_png):
    """CliRunner's stdout is not a terminal: no cell may be cut short ("astron…")."""
    from typer.testing import CliRunner

    from newsmotion_engine.cli import app
    from newsmotion_engine.guidance.catalogue import canonical_loops

    runner = CliRunner()
    long_id = "astronaut_anchor_with_a_rather_long_name"
    assert runner.invoke(app, ["persona", "add", str(astronaut_png), "--id", long_id]).exit_code == 0
    result = runner.invoke(app, ["render", "--persona", long_id, "--loop", "nod", "--width", "180", "--height", "320"])
    assert result.exit_code == 0, result.output
    outputs = {}
    for args in (["scorecard"], ["caches"], ["persona", "list"], ["loops", "list"]):
        result = runner.invoke(app, args)
        assert result.exit_code == 0, result.output
        outputs[" ".join(args)] = result.output
        assert "…" not in result.output, args
    assert long_id in outputs["scorecard"] and long_id in outputs["caches"] and long_id in outputs["persona list"]
    created = json.loads(runner.invoke(app, ["caches", "--json"]).output)
    assert all(r["created"] in outputs["caches"] for r in created if r["created"])
    for spec in canonical_loops().values():
        assert spec.description in outputs["loops list"]
