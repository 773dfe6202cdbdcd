"""`newsmotion scorecard`."""

import json

from .conftest import run


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
