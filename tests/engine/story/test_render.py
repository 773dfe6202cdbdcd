"""A story rendered end to end on a drawn persona (small, fast): one mp4 with an AAC stream as long
as the video, a record per part, the skip when nothing changed, nothing left behind on failure."""

import importlib.util
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from newsmotion_engine.render import RenderSpec, get_backend
from newsmotion_engine.speech.visemes import VisemeTrack
from newsmotion_engine.story.format import parse_story
from newsmotion_engine.story.render import StoryInputs, render_story
from newsmotion_engine.story.speech import SentenceAudio, assemble_speech
from newsmotion_engine.story.telemetry import StoryTelemetry
from newsmotion_engine.video.streams import av_sync, stream_timings

FPS = 30
SPEC = RenderSpec(width=216, height=384, fps=FPS)


def _fixtures():
    # The drawn-figure fixtures live with the render tests; load them by path (no packages).
    path = Path(__file__).resolve().parents[1] / "render" / "conftest.py"
    spec = importlib.util.spec_from_file_location("_render_fixtures", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def sentence(speech_id: str, seconds: float, rate: int = 16000) -> SentenceAudio:
    """A syllable-like tone burst and a matching viseme track."""
    t = np.arange(int(seconds * rate)) / rate
    envelope = np.clip(np.sin(2 * np.pi * 4 * t), 0, None)
    samples = (0.3 * envelope * np.sin(2 * np.pi * 220 * t)).astype(np.float32)
    frames = int(np.ceil(seconds * FPS))
    curve = np.clip(np.sin(2 * np.pi * 4 * np.arange(frames) / FPS), 0, 1).astype(np.float32)
    return SentenceAudio(speech_id, samples, rate, VisemeTrack(FPS, curve, curve * 0.5, curve * 0.2, curve))


def drawn_story_inputs(folder: Path) -> StoryInputs:
    """A two-sentence story with two cues of a drawn figure's wave loop, its speech synthetic
    (the CLI test builds on it too)."""
    fx = _fixtures()
    story = parse_story({
        "persona": "synth",
        "speech": [{"id": "one", "text": "Good evening."}, {"id": "two", "text": "Here is the news."}],
        "gestures": [{"loop": "synth_wave", "sentence": 1}, {"loop": "synth_wave", "at": 1.6, "for": 0.5}],
    }, folder / "evening.yaml")  # fmt: skip
    drawn = fx.make_persona(216, 384)
    persona = types.SimpleNamespace(**vars(drawn), digest="persona-digest")
    loop = fx.make_loop(30)
    guidance = types.SimpleNamespace(loop_id=loop.loop_id, keypoints=loop.keypoints, fps=FPS, frames=30, digest="loop-digest")
    speech = assemble_speech(story, [sentence("one", 0.8), sentence("two", 0.9)], FPS)
    return StoryInputs(story, persona, {"synth_wave": guidance}, speech)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    return drawn_story_inputs(tmp_path_factory.mktemp("story"))


def test_story_renders_one_mp4_with_sound_in_sync(storage, inputs, tmp_path):
    backend = get_backend("warp")
    out = tmp_path / "evening.mp4"
    tele = render_story(storage, inputs.story, backend, SPEC, inputs=inputs, out_path=out)
    speech = inputs.speech
    # Scored on the written mp4, or a reason (the drawn figure's face may not be found).
    assert (tele.lip_sync is None) != (tele.lip_sync_reason is None)
    if tele.lip_sync is not None:
        assert tele.lip_sync["frames"] == speech.frames
    assert tele.frames == speech.frames and tele.duration_s == pytest.approx(speech.frames / FPS, abs=1e-3)
    kinds = {s.media_type: s for s in stream_timings(out)}
    assert kinds["video"].packets == speech.frames and kinds["audio"].codec == "aac"
    sync = av_sync(out, FPS)
    assert sync.has_audio and sync.in_sync
    assert abs(sync.video_s - sync.audio_s) < 1 / FPS  # durations match within a frame
    assert tele.av_sync == sync.as_dict()
    # One record per part: idle, the sentence-1 gesture, idle, the timed gesture, idle.
    assert [(p["kind"], p["cue"]) for p in tele.parts] == [
        ("idle", None), ("gesture", "gestures[0]"), ("idle", None), ("gesture", "gestures[1]"), ("idle", None)]
    assert sum(p["frames"] for p in tele.parts) == tele.frames
    assert all(p["render_ms"] > 0 for p in tele.parts)
    assert tele.joins["max_jump_at_joins_px"] is not None and tele.moves_lips is backend.moves_lips
    assert StoryTelemetry.read(out.with_suffix(".json")) == tele

    again = render_story(storage, inputs.story, backend, SPEC, inputs=inputs, out_path=out)
    assert again.outcome == "skipped" and again.created_at == tele.created_at


def test_a_story_without_audio_would_be_caught(tmp_path):
    from newsmotion_engine.video.encode import VideoEncoder

    with VideoEncoder(tmp_path / "silent.mp4", 64, 64, FPS) as enc:
        for _ in range(10):
            enc.write(np.zeros((64, 64, 3), np.uint8))
    sync = av_sync(tmp_path / "silent.mp4", FPS)
    assert not sync.has_audio and not sync.in_sync and sync.video_s == pytest.approx(10 / FPS, abs=1e-3)


def test_a_failing_backend_leaves_nothing_behind(storage, inputs, tmp_path):
    backend = get_backend("warp")
    real = backend.frames

    def broken(*args, **kwargs):
        for i, frame in enumerate(real(*args, **kwargs)):
            if i == 5:
                raise RuntimeError("backend failed mid-story")
            yield frame

    backend.frames = broken
    with pytest.raises(RuntimeError, match="mid-story"):
        render_story(storage, inputs.story, backend, SPEC, inputs=inputs, out_path=tmp_path / "evening.mp4", force=True,
                     lip_sync=False)
    assert [p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock")] == []


def test_cues_that_overlap_or_start_after_the_end_are_story_errors(storage, tmp_path):
    from newsmotion_engine.story.format import StoryError
    from newsmotion_engine.story.render import check_story, story_slots

    speech = drawn_story_inputs(tmp_path).speech  # 0.3 s lead-in, two sentences, 3.0 s in all

    def slots(*gestures):
        story = parse_story({"persona": "synth", "speech": ["a", "b"], "gestures": list(gestures)}, tmp_path / "s.yaml")
        return story_slots(story, speech, {"wave": 30})

    assert [(s.start, s.stop) for s in slots({"loop": "wave", "sentence": 2}, {"loop": "wave", "at": 0.0})] == [
        speech.spans[1], (0, 30)]  # fmt: skip
    with pytest.raises(StoryError, match=r"s.yaml: gestures\[1\]: starts at 0.50 s, inside gestures\[0\] \(0.30-1.10 s\)"):
        slots({"loop": "wave", "sentence": 1}, {"loop": "wave", "at": 0.5})
    with pytest.raises(StoryError, match=r"gestures\[0\]\.at: 100 s is after the story ends \(3.00 s\)"):
        slots({"loop": "wave", "at": 100})
    storage.persona_dir("synth").mkdir(parents=True)
    story = parse_story({"persona": "synth", "speech": ["a"], "gestures": [{"loop": "wave", "at": 0}]}, tmp_path / "s.yaml")
    with pytest.raises(StoryError, match=r"gestures\[0\]\.loop: unknown loop 'wave'"):
        check_story(storage, story)
    with pytest.raises(StoryError, match=r"persona: unknown persona 'nobody'"):
        check_story(storage, parse_story({"persona": "nobody", "speech": ["a"]}, tmp_path / "s.yaml"))


def test_a_backend_that_renders_cached_loops_cannot_render_a_story(storage, inputs):
    from newsmotion_engine.errors import NewsmotionError
    from newsmotion_engine.render.base import BackendNeeds

    class CachedLoopsOnly:
        name = "cached-loops"
        needs = BackendNeeds(guidance=frozenset({"keypoints", "pose_latents"}))

    with pytest.raises(NewsmotionError, match=r"backend 'cached-loops' cannot render a story: .*\(pose_latents per loop\)"):
        render_story(storage, inputs.story, CachedLoopsOnly(), SPEC, inputs=inputs)
