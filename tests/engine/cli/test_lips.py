"""`newsmotion lips`: a render lip-synced to a speech through the MuseTalk stage (tiny models)."""

import json

from newsmotion_engine.videoio import open_video

from .conftest import run


def test_lips_renders_then_syncs_with_sound(capsys, astronaut_png, storage, one_torch_thread):
    assert run(capsys, "persona", "add", str(astronaut_png), "--id", "astro")[0] == 0
    assert run(capsys, "speech", "say", "Hello.", "--id", "hi")[0] == 0
    args = ("lips", "--persona", "astro", "--loop", "nod", "--speech", "hi", "--width", "180", "--height", "320",
            "-o", 'preset="tiny"', "-o", 'device="cpu"')
    code, out, err = run(capsys, *args)
    assert code == 0, err
    assert "random weights" in out
    mp4 = storage.render_path("astro", "nod", "warp").parent / "lips" / "warp-musetalk-hi.mp4"
    record = json.loads(mp4.with_suffix(".json").read_text())
    assert record["frames"] == record["redrawn"] > 0 and record["avatar_built"]
    assert open_video(mp4).frame_count == record["frames"]
    code, out, _ = run(capsys, *args)  # the avatar sub-cache is current: not built again
    assert code == 0 and json.loads(mp4.with_suffix(".json").read_text())["avatar_built"] is False


def test_lips_needs_a_known_speech(capsys, astronaut_png, storage):
    assert run(capsys, "persona", "add", str(astronaut_png), "--id", "astro")[0] == 0
    code, _, err = run(capsys, "lips", "--persona", "astro", "--loop", "nod", "--speech", "nothing")
    assert code == 1 and err.startswith("error:") and "nothing" in err


def test_lips_refuses_an_unknown_option(capsys, storage):
    code, _, err = run(capsys, "lips", "--persona", "astro", "--loop", "nod", "--speech", "hi", "-o", "steps=3")
    assert code == 1 and "musetalk options" in err
