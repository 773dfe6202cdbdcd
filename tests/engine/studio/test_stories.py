"""The studio plays each story's mp4 with its sound on the index page."""

import dataclasses
import importlib.util
import re
from pathlib import Path

import pytest

from newsmotion_engine.render import RenderSpec, get_backend
from newsmotion_engine.story.render import render_story
from newsmotion_engine.story.telemetry import StoryTelemetry
from newsmotion_engine.studio.site import build_studio

from . import browser as B


def _story_tests():
    path = Path(__file__).resolve().parents[1] / "story" / "test_render.py"
    spec = importlib.util.spec_from_file_location("_story_render_tests", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def rendered_story(storage, tmp_path) -> Path:
    """The drawn figure's story rendered where stories live; its mp4."""
    inputs = _story_tests().drawn_story_inputs(tmp_path)
    out = storage.story_render_path("synth", "evening", "warp")
    out.parent.mkdir(parents=True)
    render_story(storage, inputs.story, get_backend("warp"), RenderSpec(width=216, height=384), inputs=inputs, out_path=out,
                 lip_sync=False)
    return out


def test_the_index_plays_stories_with_sound(storage, tmp_path):
    out = rendered_story(storage, tmp_path)
    report = build_studio(storage, pose=False, bench_results=tmp_path / "no-results")
    assert report.stories == 1
    html = report.index.read_text()
    (video,) = re.findall(r'<video src="media/stories/synth/evening/warp.mp4"[^>]*>', html)
    assert "controls" in video and "muted" not in video
    assert (report.root / "media" / "stories" / "synth" / "evening" / "warp.mp4").read_bytes() == out.read_bytes()
    assert "audio in sync" in html


def test_a_story_without_its_record_says_so(storage, tmp_path):
    out = rendered_story(storage, tmp_path)
    out.with_suffix(".json").write_text("{}")
    html = build_studio(storage, pose=False, bench_results=tmp_path / "no-results").index.read_text()
    assert "not a story record" in html


def test_a_story_with_musetalk_lips_says_whose_and_the_weights(storage, tmp_path):
    out = rendered_story(storage, tmp_path)
    assert "lips: " not in build_studio(storage, pose=False, bench_results=tmp_path / "no-results").index.read_text()
    record = out.with_suffix(".json")
    tele = StoryTelemetry.read(record)
    dataclasses.replace(tele, lips="musetalk", musetalk={"weights": "random weights"}).write(record)
    html = build_studio(storage, pose=False, bench_results=tmp_path / "no-results").index.read_text()
    assert "lips: musetalk (random weights)" in html


@pytest.mark.skipif(B.missing() is not None, reason=f"studio browser test: {B.missing()}")
def test_a_browser_plays_the_story_with_its_sound(storage, tmp_path):
    rendered_story(storage, tmp_path)
    build_studio(storage, pose=False, bench_results=tmp_path / "no-results")
    with B.served(storage.studio_dir) as url, B.browser() as chromium:
        page = chromium.new_page()
        page.goto(f"{url}/index.html")
        page.evaluate("() => document.querySelector('figure.story video').play()")
        page.wait_for_function("() => document.querySelector('figure.story video').currentTime > 1.0", timeout=20000)
        state = page.evaluate("""() => { const v = document.querySelector('figure.story video');
            return {muted: v.muted, audio: v.webkitAudioDecodedByteCount, frames: v.webkitDecodedFrameCount, error: v.error}; }""")
    assert state["error"] is None and not state["muted"] and state["frames"] > 0
    assert state["audio"] > 0  # the audio stream is decoded: the story plays with its sound
