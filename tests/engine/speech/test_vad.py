"""voice_segments (silero VAD): finds the spoken sentences of TTS speech padded with silence, and
leaves the caller's torch thread count alone."""

import numpy as np
import pytest
import scipy.signal

from newsmotion_engine.speech.tts import synthesize
from newsmotion_engine.speech.vad import vad_params, voice_segments


def _at_16k(samples):
    return scipy.signal.resample_poly(samples, 320, 441).astype(np.float32)  # 22050 -> 16000 Hz


def test_segments_match_the_spoken_sentences():
    speech = synthesize("Good evening, here is the news. That is all for tonight.")
    lead = 1.0
    audio = np.concatenate([np.zeros(16000, np.float32), _at_16k(speech.samples), np.zeros(8000, np.float32)])
    segments = voice_segments(audio)
    words = speech.words
    # Two sentences, split at the full stop's pause (the comma's is too short to count).
    assert len(segments) == 2
    (s1, e1), (s2, e2) = segments
    assert abs(s1 - (lead + words[0].start_s)) < 0.1 and abs(e1 - (lead + words[5].end_s)) < 0.15
    assert abs(s2 - (lead + words[6].start_s)) < 0.1 and abs(e2 - (lead + words[-1].end_s)) < 0.15


def test_silence_and_noise_have_no_speech():
    rng = np.random.default_rng(0)
    assert voice_segments(np.zeros(32000, np.float32)) == []
    assert voice_segments((rng.standard_normal(32000) * 0.01).astype(np.float32)) == []


def test_thread_count_is_left_alone_and_rate_is_checked():
    import torch

    before = torch.get_num_threads()
    voice_segments(np.zeros(16000, np.float32))
    assert torch.get_num_threads() == before
    assert vad_params()["model"] == "silero-vad" and vad_params()["version"] == "6.2.3"
    with pytest.raises(ValueError, match="16000 Hz"):
        voice_segments(np.zeros(8000, np.float32), 8000)
