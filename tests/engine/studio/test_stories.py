"""The studio plays each story's mp4 with its sound on the index page."""

import importlib.util
import re
from pathlib import Path

from newsmotion_engine.render import RenderSpec, get_backend
from newsmotion_engine.story.render import render_story
from newsmotion_engine.studio.site import build_studio


def _story_tests():
    path = Path(__file__).resolve().parents[1] / "story" / "test_render.py"
    spec = importlib.util.spec_from_file_location("_story_render_tests", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_index_plays_stories_with_sound(storage, tmp_path):
    inputs = _story_tests().drawn_story_inputs(tmp_path)
    out = storage.story_render_path("synth", "evening", "warp")
    out.parent.mkdir(parents=True)
    render_story(storage, inputs.story, get_backend("warp"), RenderSpec(width=216, height=384), inputs=inputs, out_path=out)
    report = build_studio(storage, pose=False, bench_results=tmp_path / "no-results")
    assert report.stories == 1
    html = report.index.read_text()
    (video,) = re.findall(r'<video src="media/stories/synth/evening/warp.mp4"[^>]*>', html)
    assert "controls" in video and "muted" not in video
    assert (report.root / "media" / "stories" / "synth" / "evening" / "warp.mp4").read_bytes() == out.read_bytes()
    assert "audio in sync" in html


def test_a_story_without_its_record_says_so(storage, tmp_path):
    inputs = _story_tests().drawn_story_inputs(tmp_path)
    out = storage.story_render_path("synth", "evening", "warp")
    out.parent.mkdir(parents=True)
    render_story(storage, inputs.story, get_backend("warp"), RenderSpec(width=216, height=384), inputs=inputs, out_path=out)
    out.with_suffix(".json").write_text("{}")
    html = build_studio(storage, pose=False, bench_results=tmp_path / "no-results").index.read_text()
    assert "not a story record" in html
