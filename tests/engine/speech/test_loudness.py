"""BS.1770 integrated loudness: the reference tone's reading, gain, the absolute and relative gates,
and normalisation to a target (what EchoMimicV3's official inference does before its encoder)."""

import math

import numpy as np
import pytest

from newsmotion_engine.speech.loudness import integrated_loudness, normalize_loudness


def _tone(seconds, rate, amplitude=1.0, hz=997.0):
    return amplitude * np.sin(2 * np.pi * hz * np.arange(int(seconds * rate)) / rate)


@pytest.mark.parametrize("rate", [16000, 48000])
def test_a_full_scale_997_hz_tone_reads_minus_3_lufs(rate):
    # BS.1770: a 0 dBFS 1 kHz sine in one channel reads -3.01 LKFS; the official meter's filters
    # (derived from the shelf and high-pass formulas, not the 48 kHz table) are within 0.1 dB of it.
    assert integrated_loudness(_tone(3, rate), rate) == pytest.approx(-3.01, abs=0.1)


def test_a_gain_shifts_the_loudness_by_its_decibels():
    x = _tone(2, 16000, 0.3) + 0.05 * np.random.default_rng(0).standard_normal(32000)
    assert integrated_loudness(0.1 * x, 16000) - integrated_loudness(x, 16000) == pytest.approx(-20.0, abs=1e-9)


def test_silence_and_quiet_passages_are_gated_out():
    rate = 16000
    tone = _tone(3, rate, 0.5)
    alone = integrated_loudness(tone, rate)
    # Ungated, 3 s of silence (or of a tone 40 dB down) would lower the mean square by 3 dB.
    assert integrated_loudness(np.concatenate([tone, np.zeros(3 * rate)]), rate) == pytest.approx(alone, abs=0.3)
    assert integrated_loudness(np.concatenate([tone, 0.01 * tone]), rate) == pytest.approx(alone, abs=0.3)
    # A passage 6 dB down is above the relative gate (-10 LU) and counts.
    assert integrated_loudness(np.concatenate([tone, 0.5 * tone]), rate) < alone - 1.5
    assert integrated_loudness(np.zeros(rate), rate) == -math.inf
    with pytest.raises(ValueError, match="shorter than one"):
        integrated_loudness(np.ones(1000), rate)


def test_normalize_reaches_the_target_and_leaves_silence_and_short_clips_alone():
    rate = 16000
    x = 0.02 * _tone(2, rate)
    y, gain_db = normalize_loudness(x, rate, -23.0)
    assert y.dtype == np.float32 and integrated_loudness(y, rate) == pytest.approx(-23.0, abs=1e-4)
    assert gain_db == pytest.approx(-23.0 - integrated_loudness(x, rate))
    for untouched in (np.zeros(rate), 0.5 * _tone(0.3, rate)):
        out, gain = normalize_loudness(untouched, rate, -23.0)
        assert gain is None
        np.testing.assert_array_equal(out, untouched.astype(np.float32))
