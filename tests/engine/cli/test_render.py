"""`newsmotion render`."""

from .conftest import run


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
