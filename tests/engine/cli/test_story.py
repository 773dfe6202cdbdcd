"""`newsmotion story render`: a story to an mp4 with sound; bad input is one line and exit 1.

The render's inputs come from a drawn persona (prepare_story replaced): building a real persona and
speech is the engine tests' business (tests/engine/story/), the command's wiring is this file's."""

import importlib.util
import json
from pathlib import Path

import pytest

from newsmotion_engine.story import render as story_render
from newsmotion_engine.video.streams import av_sync

from .conftest import run


def _story_tests():
    path = Path(__file__).resolve().parents[1] / "story" / "test_render.py"
    spec = importlib.util.spec_from_file_location("_story_render_tests", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture
def drawn_inputs(monkeypatch, tmp_path):
    """prepare_story gives a drawn persona's inputs for the story the command read."""
    base = _story_tests().drawn_story_inputs(tmp_path)

    def prepare(storage, story, spec, *, build=True, on_step=None):
        return story_render.StoryInputs(story, base.persona, base.loops, base.speech)

    monkeypatch.setattr(story_render, "check_story", lambda storage, story: None)
    monkeypatch.setattr(story_render, "prepare_story", prepare)


STORY = """\
persona: synth
speech:
  - {id: one, text: Good evening.}
  - {id: two, text: Here is the news.}
gestures:
  - {loop: synth_wave, sentence: 1}
  - {loop: synth_wave, at: 1.6, for: 0.5}
"""


def test_story_render_writes_an_mp4_with_sound(capsys, storage, tmp_path, drawn_inputs):
    path = tmp_path / "evening.yaml"
    path.write_text(STORY)
    out = tmp_path / "evening.mp4"
    args = ("story", "render", str(path), "--out", str(out), "--width", "216", "--height", "384", "--no-lip-sync")
    code, stdout, err = run(capsys, *args)
    assert code == 0, err
    assert "story evening (synth, warp)" in stdout and f"{out}: " in stdout and "in sync" in stdout
    assert "lip sync: not measured (measuring the written clip is turned off)\n" in stdout
    assert av_sync(out, 30).in_sync and out.with_suffix(".json").is_file()
    code, stdout, _ = run(capsys, *args)
    assert code == 0 and "not rendered again" in stdout


def test_bad_story_files_are_one_line_and_exit_1(capsys, storage, tmp_path):
    path = tmp_path / "evening.yaml"
    path.write_text("persona: astronaut\nspeech: []\n")
    code, out, err = run(capsys, "story", "render", str(path))
    assert code == 1 and err.strip() == f"error: {path}: speech: give a list of one or more sentences (each with text, audio or id)"
    path.write_text("persona: nobody\nspeech: [hi]\n")
    code, _, err = run(capsys, "story", "render", str(path))
    assert code == 1 and "persona: unknown persona 'nobody'" in err and len(err.strip().splitlines()) == 1
    path.write_text("persona: nobody\nspeech: [hi]\n")
    code, _, err = run(capsys, "story", "render", str(path), "--out", str(tmp_path / "x.mov"))
    assert code == 1 and "output must be an .mp4 file" in err
    assert not list(storage.root.rglob("*.mp4"))


def _short_story_inputs():
    path = Path(__file__).resolve().parents[1] / "story" / "test_lips.py"
    spec = importlib.util.spec_from_file_location("_story_lips_tests", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.short_story_inputs


def test_story_render_with_musetalk_lips(capsys, storage, tmp_path, monkeypatch, one_torch_thread):
    base = _short_story_inputs()(tmp_path)
    monkeypatch.setattr(story_render, "check_story", lambda storage, story: None)
    monkeypatch.setattr(story_render, "prepare_story",
                        lambda storage, story, spec, *, build=True, on_step=None: story_render.StoryInputs(story, base.persona, base.loops, base.speech))  # fmt: skip
    path = tmp_path / "short.yaml"
    path.write_text("persona: synth\nspeech: [{id: one, text: Hi.}]\ngestures: [{loop: synth_wave, sentence: 1}]\n")
    out = tmp_path / "short.mp4"
    code, stdout, err = run(capsys, "story", "render", str(path), "--out", str(out), "--width", "216", "--height", "384",
                            "--no-lip-sync", "--lips", "musetalk", "--lips-option", 'preset="tiny"', "--lips-option", "device=cpu")  # fmt: skip
    assert code == 0, err
    assert "silent for MuseTalk" in stdout and "lips: musetalk (random weights)" in stdout
    assert "MuseTalk has random weights" in stdout and "lips: MuseTalk" in stdout  # the stage's progress line
    record = json.loads(out.with_suffix(".json").read_text())
    assert record["lips"] == "musetalk" and record["musetalk"]["redrawn"] > 0 and av_sync(out, 30).in_sync


def test_bad_lips_options_are_one_line_and_exit_1(capsys, storage, tmp_path):
    path = tmp_path / "evening.yaml"
    path.write_text(STORY)
    out = tmp_path / "evening.mp4"
    cases = [
        (("--lips", "musetalk", "--lips-option", "steps=3"), "error: musetalk options: unknown 'steps' (use model_path, preset,"),
        (("--lips", "musetalk", "--lips-option", "batch_size=0"), "error: musetalk batch_size 0: use 1..64"),
        (("--lips-option", "preset=tiny"), "error: musetalk options (preset) need lips 'musetalk', not 'backend'"),
        (("--lips", "lipstick"), "error: lips 'lipstick': use backend or musetalk"),
    ]
    for extra, message in cases:
        code, _, err = run(capsys, "story", "render", str(path), "--out", str(out), *extra)
        assert code == 1 and err.startswith(message) and len(err.strip().splitlines()) == 1, err
    assert not out.exists() and not list(storage.root.rglob("*.mp4"))
