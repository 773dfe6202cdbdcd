"""Viseme tracks: targets by phoneme class, coarticulation, frame timing, the audio estimate."""

from types import SimpleNamespace

import numpy as np
import pytest

from newsmotion_engine.speech.tts import Phoneme, synthesize
from newsmotion_engine.speech.visemes import (
    VisemeTrack,
    audio_energy,
    frame_count,
    mouth_target,
    visemes_from_audio,
    visemes_from_phonemes,
)


def _seq(*pairs, start=0.0):
    """[(symbol, seconds), ...] -> back-to-back Phonemes."""
    out, t = [], start
    for symbol, seconds in pairs:
        out.append(Phoneme(t, t + seconds, symbol))
        t += seconds
    return out


def _at(track, seconds):
    return int(seconds * track.fps)


def test_vowel_classes_shape_the_mouth():
    (a,), _, _ = mouth_target("'A:")
    (i,), _, _ = mouth_target("'i:")
    (u,), _, _ = mouth_target("'u:")
    (m,), dominance_m, _ = mouth_target("m")
    assert a[0] > i[0] and a[0] > u[0]          # /a/ opens most
    assert i[1] > a[1] and i[1] > u[1]          # /i/ spreads
    assert u[2] > 0.8 and i[2] == 0.0           # /u/ rounds
    assert m[0] == 0.0 and dominance_m == 1.0   # /m/ closes the lips and holds
    shapes, _, _ = mouth_target("aI")           # a diphthong moves from open to spread
    assert len(shapes) == 2 and shapes[0][0] > shapes[1][0] and shapes[1][1] > shapes[0][1]
    assert mouth_target("'i@3")[0] == mouth_target("i@")[0][:2] or len(mouth_target("'i@3")[0]) == 2


def test_track_follows_phonemes_and_rests_in_pauses():
    phonemes = _seq(("_:", 0.3), ("m", 0.08), ("'A:", 0.25), ("_:", 0.3), ("w", 0.08), ("'u:", 0.25), ("_:", 0.3))
    track = visemes_from_phonemes(phonemes, 1.56, fps=50)
    assert len(track) == frame_count(1.56, 50) == 78
    assert track.open[_at(track, 0.5)] > 0.6                       # mid /a/
    assert track.open[_at(track, 0.1)] < 0.05 and track.energy[_at(track, 0.1)] < 0.05   # rest
    assert track.round[_at(track, 1.1)] > 0.6 and track.round[_at(track, 0.5)] < 0.1
    assert track.open[_at(track, 0.34)] < track.open[_at(track, 0.5)] - 0.3  # the /m/ closure


def test_coarticulation_h_takes_its_shape_from_the_vowel():
    track = visemes_from_phonemes(_seq(("h", 0.08), ("'u:", 0.3)), 0.38, fps=100)
    # /h/ has no lip shape of its own: rounding from /u/ is already there during it.
    assert track.round[4] > 0.5
    # while a held /m/ before an open vowel stays closed.
    closed = visemes_from_phonemes(_seq(("m", 0.1), ("'A:", 0.3)), 0.4, fps=100)
    assert closed.open[4] < 0.25 < closed.open[25]


def test_frames_cover_the_duration_at_any_fps():
    speech = synthesize("Good evening, here is the news.")
    for fps in (24, 25, 30, 60):
        track = visemes_from_phonemes(speech.phonemes, speech.duration_s, fps)
        assert len(track) == frame_count(speech.duration_s, fps)
        assert track.open.dtype == np.float32 and 0 <= track.open.min() and track.open.max() <= 1


def test_audio_estimate_agrees_with_the_phoneme_track():
    speech = synthesize("Good evening, here is the news. Who knew? We should move, you see.")
    from_phonemes = visemes_from_phonemes(speech.phonemes, speech.duration_s, 30)
    from_audio = visemes_from_audio(speech, 30)
    assert len(from_audio) == len(from_phonemes)
    for channel, least in (("open", 0.6), ("wide", 0.5), ("round", 0.4), ("energy", 0.8)):
        r = np.corrcoef(getattr(from_audio, channel), getattr(from_phonemes, channel))[0, 1]
        assert r > least, (channel, r)


def test_audio_energy_is_zero_in_silence_and_high_in_a_tone():
    rate = 16000
    samples = np.zeros(rate * 2, np.float32)
    t = np.arange(rate // 2) / rate
    samples[rate // 2:rate] = 0.3 * np.sin(2 * np.pi * 220 * t)
    energy = audio_energy(SimpleNamespace(samples=samples, sample_rate=rate), 25)
    assert len(energy) == 50
    assert energy[:10].max() < 0.05 and energy[15:23].min() > 0.9 and energy[30:].max() < 0.05
    # Digital silence (or near it) is a closed mouth, not "as loud as this audio gets".
    quiet = visemes_from_audio(SimpleNamespace(samples=np.full(rate, 1e-4, np.float32), sample_rate=rate), 25)
    assert quiet.open.max() == 0.0 and quiet.energy.max() == 0.0


def test_track_slice_stack_and_validation():
    track = visemes_from_phonemes(_seq(("'A:", 0.5)), 0.5, 30)
    part = track.slice(3, 9)
    assert len(part) == 6 and np.array_equal(part.open, track.open[3:9])
    again = VisemeTrack.from_stacked(30, track.stacked())
    assert all(np.array_equal(getattr(again, c), getattr(track, c)) for c in ("open", "wide", "round", "energy"))
    with pytest.raises(ValueError):
        VisemeTrack(30, np.ones(3), np.ones(3), np.ones(2), np.ones(3))
    with pytest.raises(ValueError):
        VisemeTrack(30, np.full(3, 1.5), np.ones(3), np.ones(3), np.ones(3))
