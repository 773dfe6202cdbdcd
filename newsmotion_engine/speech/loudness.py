"""Integrated loudness (ITU-R BS.1770-4) and loudness normalisation of mono audio.

EchoMimicV3's official inference normalises a speech to -23 LUFS before its audio encoder reads it
(``infer_flash.py``'s ``loudness_norm``, through pyloudnorm), and the flash models' encoder
(``chinese-wav2vec2-base``, ``do_normalize: false``) reads the samples at that level: the gain
changes the features. This module measures the loudness the way that code does, so the official
feature recipe (:mod:`newsmotion_engine.speech.clip_features`) needs no extra dependency:

- K-weighting: a high shelf (+4 dB above ~1.5 kHz, Q 1/sqrt(2)) then a high pass (38 Hz, Q 0.5),
  each a biquad derived for the audio's own sample rate from the shelf and high-pass formulas of
  the Audio EQ Cookbook (the filters BS.1770 tabulates for 48 kHz, re-derived for 16 kHz);
- the mean square of 400 ms blocks every 100 ms (75 % overlap), the number of blocks
  ``round((T - 0.4) / 0.1) + 1`` for ``T`` seconds;
- block loudness ``-0.691 + 10 log10(z)``; the blocks at or above -70 LUFS (absolute gate), then those
  above both -70 LUFS and their mean's loudness less 10 LU (relative gate); the loudness of the mean
  square of the blocks kept.

The arithmetic is float64; the official meter keeps float32 audio in float32 after filtering, which
moves the measured loudness by far less than 0.001 dB.

Reference: ITU-R BS.1770-4, "Algorithms to measure audio programme loudness and true-peak audio
level" (2015), https://www.itu.int/rec/R-REC-BS.1770
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["BLOCK_S", "integrated_loudness", "normalize_loudness"]

BLOCK_S = 0.4  # the gating block
_STEP = 0.25  # blocks start every quarter block (75 % overlap)
_ABSOLUTE_GATE_LUFS = -70.0
_RELATIVE_GATE_LU = -10.0
_OFFSET = -0.691  # makes a 997 Hz sine at full scale read -3.01 LUFS (the K filter's gain there)


def _biquad(kind: str, gain_db: float, q: float, fc: float, rate: float) -> tuple[np.ndarray, np.ndarray]:
    a_gain = 10.0 ** (gain_db / 40.0)
    w0 = 2.0 * math.pi * fc / rate
    cos_w0, alpha = math.cos(w0), math.sin(w0) / (2.0 * q)
    if kind == "high_shelf":
        root = 2.0 * math.sqrt(a_gain) * alpha
        b = [a_gain * ((a_gain + 1) + (a_gain - 1) * cos_w0 + root), -2 * a_gain * ((a_gain - 1) + (a_gain + 1) * cos_w0),
             a_gain * ((a_gain + 1) + (a_gain - 1) * cos_w0 - root)]  # fmt: skip
        a = [(a_gain + 1) - (a_gain - 1) * cos_w0 + root, 2 * ((a_gain - 1) - (a_gain + 1) * cos_w0),
             (a_gain + 1) - (a_gain - 1) * cos_w0 - root]  # fmt: skip
    else:  # high pass
        b = [(1 + cos_w0) / 2, -(1 + cos_w0), (1 + cos_w0) / 2]
        a = [1 + alpha, -2 * cos_w0, 1 - alpha]
    return np.asarray(b) / a[0], np.asarray(a) / a[0]


def _k_weighted(samples: np.ndarray, rate: float) -> np.ndarray:
    from scipy.signal import lfilter

    y = np.asarray(samples, dtype=np.float64)
    for stage in (("high_shelf", 4.0, 1 / math.sqrt(2), 1500.0), ("high_pass", 0.0, 0.5, 38.0)):
        y = lfilter(*_biquad(stage[0], *stage[1:], rate), y)
    return y


def integrated_loudness(samples: np.ndarray, rate: float) -> float:
    """The gated loudness of mono ``samples`` (floats, full scale 1.0) in LUFS; ``-inf`` when every
    block is below the absolute gate (silence).

    Raises:
        ValueError: the audio is shorter than one 400 ms block (BS.1770 measures none).
    """
    x = np.asarray(samples).reshape(-1)
    if x.size < BLOCK_S * rate:
        raise ValueError(f"audio of {x.size / rate:.3f} s is shorter than one {BLOCK_S} s loudness block")
    y = _k_weighted(x, rate)
    n_blocks = int(round((x.size / rate - BLOCK_S) / (BLOCK_S * _STEP))) + 1
    j = np.arange(n_blocks)
    # Block bounds truncated as the official meter truncates them (same float operations).
    starts, stops = (BLOCK_S * (j * _STEP) * rate).astype(np.int64), (BLOCK_S * (j * _STEP + 1) * rate).astype(np.int64)
    energy = np.concatenate([[0.0], np.cumsum(y * y)])
    z = (energy[np.minimum(stops, y.size)] - energy[np.minimum(starts, y.size)]) / (BLOCK_S * rate)
    with np.errstate(divide="ignore"):
        block_lufs = _OFFSET + 10.0 * np.log10(z)
    above_absolute = block_lufs >= _ABSOLUTE_GATE_LUFS
    if not above_absolute.any():
        return -math.inf
    relative_gate = _OFFSET + 10.0 * math.log10(z[above_absolute].mean()) + _RELATIVE_GATE_LU
    kept = (block_lufs > relative_gate) & (block_lufs > _ABSOLUTE_GATE_LUFS)
    return _OFFSET + 10.0 * math.log10(z[kept].mean()) if kept.any() else -math.inf


def normalize_loudness(samples: np.ndarray, rate: float, target_lufs: float) -> tuple[np.ndarray, float | None]:
    """``samples`` scaled to ``target_lufs`` integrated loudness, and the gain in dB applied.

    As the official inference does it: audio measuring below -100 LUFS (silence) is returned
    unchanged, and so is audio shorter than one 400 ms block (which the official code cannot
    measure); the gain is then ``None``. The result is float32 and may exceed full scale (no
    limiting, as in pyloudnorm)."""
    x = np.asarray(samples, dtype=np.float32).reshape(-1)
    if x.size < BLOCK_S * rate:
        return x, None
    loudness = integrated_loudness(x, rate)
    if not math.isfinite(loudness) or abs(loudness) > 100.0:
        return x, None
    gain_db = target_lufs - loudness
    return (x.astype(np.float64) * 10.0 ** (gain_db / 20.0)).astype(np.float32), gain_db
