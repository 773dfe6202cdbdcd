"""The speech keyword of the backend API: a SpeechTrack (the clip's 16 kHz audio and its digest),
refused when it is not exactly the clip's duration, heard only by backends that say so
(``hears_speech``); warp takes it and renders the very same frames."""

from __future__ import annotations

import numpy as np
import pytest

from newsmotion_engine.render import RenderSpec, get_backend
from newsmotion_engine.render.base import SpeechMismatchError, check_speech, hears_speech
from newsmotion_engine.speech.audio import SpeechTrack

from tests.engine.render.viseme_tracks import speaking

SR = 16000


def _tone(seconds: float, hz: float = 220.0) -> np.ndarray:
    t = np.arange(round(seconds * SR)) / SR
    return (0.2 * np.sin(2 * np.pi * hz * t)).astype(np.float32)


def test_a_track_is_mono_16k_and_named_by_its_samples():
    a, b = SpeechTrack(_tone(0.4), label="a"), SpeechTrack(_tone(0.4).astype(np.float64), label="b")
    assert a.digest == b.digest and a.duration_s == pytest.approx(0.4)  # same samples, same digest
    assert SpeechTrack(_tone(0.4, 330.0), label="c").digest != a.digest
    with pytest.raises(ValueError, match="mono"):
        SpeechTrack(np.zeros((2, 100), np.float32), label="stereo")
    with pytest.raises(ValueError, match="16000 Hz"):
        SpeechTrack(_tone(0.4), label="8k", sample_rate=8000)


def test_a_track_of_another_duration_is_refused():
    check_speech(None, 12, 30)
    check_speech(SpeechTrack(_tone(0.4), label="ok"), 12, 30)  # 12 frames at 30 fps = 0.4 s
    with pytest.raises(SpeechMismatchError, match=r"'short' has 6000 samples \(0.375 s\) for a 12-frame clip at 30 fps \(6400"):
        check_speech(SpeechTrack(_tone(0.375), label="short"), 12, 30)


def test_who_hears_a_speech():
    assert hears_speech(get_backend("echomimic-v3", preset="tiny")) is True  # constructed, not loaded
    assert hears_speech(get_backend("warp")) is False and hears_speech(object()) is False


def test_warp_takes_a_track_and_renders_the_same_frames(synth):
    persona, loop = synth.make_persona(128, 224), synth.make_loop(6)
    spec = RenderSpec(128, 224, fps=30)
    backend = get_backend("warp", threads=1)
    track, visemes = SpeechTrack(_tone(0.2), label="ignored"), speaking(6)
    plain = np.stack(list(backend.frames(loop, persona, loop.keypoints, spec, visemes=visemes)))
    heard = np.stack(list(backend.frames(loop, persona, loop.keypoints, spec, visemes=visemes, speech=track)))
    np.testing.assert_array_equal(plain, heard)
