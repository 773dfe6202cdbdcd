"""A story rendered by the audio-driven backend (echomimic-v3, tiny preset, random weights, CPU):
the story's assembled speech reaches the backend as a speech track, its features are made by the
official recipe and cached by the audio's digest, the mp4 has the speech's length and sound, and
the record says the lips came from the speech audio; the backend's own speech option and a story's
speech at once are one clear error with nothing written."""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("diffusers")

pytestmark = pytest.mark.usefixtures("one_torch_thread")

from newsmotion_engine.render import RenderSpec, get_backend  # noqa: E402
from newsmotion_engine.render.base import SpeechConflictError  # noqa: E402
from newsmotion_engine.speech.audio import SpeechTrack  # noqa: E402
from newsmotion_engine.story.format import parse_story  # noqa: E402
from newsmotion_engine.story.render import StoryInputs, check_story_backend, render_story  # noqa: E402
from newsmotion_engine.story.speech import assemble_speech  # noqa: E402
from newsmotion_engine.story.telemetry import StoryTelemetry  # noqa: E402
from newsmotion_engine.video.streams import av_sync, stream_timings  # noqa: E402

FPS = 30
SPEC = RenderSpec(width=64, height=128, fps=FPS)


def _load(path: Path, name: str):
    # Sibling test modules hold the drawn fixtures; load them by path (tests are no packages).
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def _echomimic(**kw):
    return get_backend("echomimic-v3", **{"preset": "tiny", "device": "cpu", "dtype": "float32", "steps": 1, **kw})


@pytest.fixture(scope="module")
def short_story(tmp_path_factory):
    """A 0.7 s story (one 0.5 s sentence, 0.1 s before and after) of a drawn persona held as a
    cache (with a folder: echomimic-v3 keeps its persona sub-cache there)."""
    here = Path(__file__).resolve().parent
    story_tests = _load(here / "test_render.py", "_story_render_tests_audio")
    fx = _load(here.parent / "render" / "conftest.py", "_render_fixtures_audio")
    root = tmp_path_factory.mktemp("audio-story")
    story = parse_story({"persona": "synth", "speech": [{"id": "one", "text": "Good evening."}], "lead_in": 0.1, "tail": 0.1,
                         "gestures": [{"loop": "synth_wave", "at": 0.0, "for": 0.3}]}, root / "short.yaml")  # fmt: skip
    drawn = fx.make_persona(144, 256)
    (root / "persona").mkdir()
    persona = fx.CachedPersona("synth", drawn.portrait, drawn.person_mask, drawn.face_mask, drawn.landmarks, path=root / "persona",
                               metadata={"source": {"kind": "image", "sha256": "b" * 64}})  # fmt: skip
    persona = types.SimpleNamespace(**vars(persona), digest="persona-digest")
    loop = fx.make_loop(12)
    guidance = types.SimpleNamespace(loop_id=loop.loop_id, keypoints=loop.keypoints, fps=FPS, frames=12, digest="loop-digest")
    speech = assemble_speech(story, [story_tests.sentence("one", 0.5)], FPS)
    return StoryInputs(story, persona, {"synth_wave": guidance}, speech)


def test_a_story_renders_with_echomimic_v3_hearing_its_speech(storage, short_story, tmp_path):
    inputs, speech = short_story, short_story.speech
    backend = _echomimic()
    check_story_backend(backend)  # keypoints per loop are all it needs
    out = tmp_path / "short.mp4"
    tele = render_story(storage, inputs.story, backend, SPEC, inputs=inputs, out_path=out, lip_sync=False)

    # One mp4 of the speech's length, with its sound.
    assert tele.frames == speech.frames == 21 and tele.duration_s == pytest.approx(0.7, abs=1e-3)
    kinds = {s.media_type: s for s in stream_timings(out)}
    assert kinds["video"].packets == speech.frames and kinds["audio"].codec == "aac"
    assert av_sync(out, FPS).in_sync

    # The record: the lips are the audio-driven backend's, from the speech audio; random weights said.
    record = StoryTelemetry.read(out.with_suffix(".json"))
    assert record.lips == "backend" and record.lips_from == "speech audio" and record.moves_lips
    assert record.lips_label == "backend (from the speech audio)" and record.weights == "random weights"
    mouth = record.backend_info["last_render"]["mouth"]
    assert mouth["driven_by"] == "speech track" and mouth["label"] == "story short" and mouth["recipe"] == "official"

    # The features the backend performed: the official recipe's, of this audio, cached by its digest, not silence.
    folders = list((storage.speech_root / "clips").glob("*/audio-features-official-25fps"))
    assert len(folders) == 1 and folders[0].parent.name.startswith(mouth["audio_digest"])
    features = np.load(folders[0] / "features.npy")
    assert features.shape[:2] == (18, 5) and np.abs(features).max() > 0  # 0.7 s at 25 fps, +-2 neighbours
    assert record.backend_info["last_render"]["audio"] == mouth["features"] != "silence"

    # A second render reads them back (the cache is not rewritten).
    written = (folders[0] / "features.npy").stat().st_mtime_ns
    again = render_story(storage, inputs.story, backend, SPEC, inputs=inputs, out_path=tmp_path / "again.mp4", lip_sync=False)
    assert again.backend_info["last_render"]["mouth"] == mouth and (folders[0] / "features.npy").stat().st_mtime_ns == written


def test_the_speech_option_and_a_story_speech_at_once_are_refused(storage, short_story, tmp_path):
    out = tmp_path / "both.mp4"
    backend = _echomimic(speech="hello", speech_root=str(storage.speech_root))
    conflict = r"'echomimic-v3' performs speech 'hello' \(its speech option\) and would be handed {}: two speeches.*-o speech"
    with pytest.raises(SpeechConflictError, match=conflict.format("the story's speech")):
        render_story(storage, short_story.story, backend, SPEC, inputs=short_story, out_path=out, lip_sync=False)
    assert list(tmp_path.iterdir()) == []
    # Called directly, the backend refuses too, before any frame.
    track = SpeechTrack(short_story.speech.audio, label="story short")
    with pytest.raises(SpeechConflictError, match=conflict.format("the speech track 'story short'")):
        backend.frames(None, short_story.persona, np.zeros((21, 133, 3), np.float32), SPEC, speech=track)
