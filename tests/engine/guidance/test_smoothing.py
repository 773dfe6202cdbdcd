"""One Euro filter: removes jitter, follows steps quickly, respects confidence 0."""

from __future__ import annotations

import numpy as np
import pytest

from newsmotion_engine.guidance.smoothing import DEFAULT_PARAMS, OneEuroFilter, smooth_sequence

FPS = 30


def _run(x: np.ndarray, conf: np.ndarray | None = None, **params) -> np.ndarray:
    """x [T, K, 2] -> filtered [T, K, 2]."""
    f = OneEuroFilter(fps=FPS, **params)
    conf = np.ones(x.shape[:2]) if conf is None else conf
    return np.stack([f.filter(x[t], conf[t]) for t in range(len(x))])


def _sway(t: np.ndarray, phase: np.ndarray, freq: float, amp: float) -> np.ndarray:
    return np.stack(
        [0.5 + amp * np.sin(2 * np.pi * freq * t[:, None] + phase),
         0.5 + amp * np.cos(2 * np.pi * freq * t[:, None] + phase)], axis=-1)


def test_reduces_jitter_on_noisy_trajectory():
    rng = np.random.default_rng(1)
    t = np.arange(120) / FPS
    phase = rng.uniform(0, 2 * np.pi, size=133)
    noise = rng.normal(0, 0.004, size=(120, 133, 2))  # detector jitter, 0.4% of the frame
    skip = 10  # let the filter settle

    # At rest: most of the jitter goes.
    still = np.full((120, 133, 2), 0.5)
    out = _run(still + noise)
    assert np.sqrt(((out - still)[skip:] ** 2).mean()) < 0.5 * 0.004

    # A slow gesture-like sway (0.3 Hz, amplitude 5% of the frame): frame-to-frame jitter (what a
    # viewer sees as shaking) drops sharply, and the error against the truth, lag included, is no
    # worse than the raw detections'.
    truth = _sway(t, phase, 0.3, 0.05)
    noisy = truth + noise
    out = _run(noisy)
    jit_in = np.abs(np.diff(noisy - truth, axis=0)).mean()
    jit_out = np.abs(np.diff(out - truth, axis=0)).mean()
    assert jit_out < 0.4 * jit_in, (jit_in, jit_out)
    rms_in = np.sqrt(((noisy - truth)[skip:] ** 2).mean())
    rms_out = np.sqrt(((out - truth)[skip:] ** 2).mean())
    assert rms_out < rms_in, (rms_in, rms_out)


def test_small_lag_on_step():
    x = np.full((40, 1, 2), 0.3)
    x[10:] = 0.6  # a jump of 30% of the frame at frame 10
    out = _run(x)
    assert np.allclose(out[:10], 0.3)
    frac = (out[10:, 0, 0] - 0.3) / 0.3
    # Speed raises the cutoff: >= 60% of the step in one frame, >= 95% within three (100 ms).
    assert frac[0] >= 0.6 and frac[2] >= 0.95, frac[:5]
    assert np.all(frac <= 1.0 + 1e-9)  # no overshoot
    # Without the speed term (beta=0) the same filter lags far more: that is what beta buys.
    slow = (_run(x, beta=0.0)[10:, 0, 0] - 0.3) / 0.3
    assert slow[2] < 0.6


def test_confidence_zero_does_not_update_and_restarts_cleanly():
    t_len = 30
    x = np.zeros((t_len, 2, 2))
    conf = np.ones((t_len, 2))
    x[:, 0] = 0.2  # point 0: present, then absent (frames 10-14), then back somewhere else
    x[:, 1] = 0.5  # point 1: always present, static
    conf[10:15, 0] = 0.0
    x[10:15, 0] = 0.0  # absent points carry zeros
    x[15:, 0] = 0.7
    out = _run(x, conf)
    # While absent: passed through untouched (zeros), no smoothing toward them.
    assert np.all(out[10:15, 0] == 0.0)
    # On reappearance: starts exactly at the new position, no glide from the stale 0.2 or 0.0.
    assert np.allclose(out[15:, 0], 0.7)
    assert np.allclose(out[:, 1], 0.5)
    # Control: had the point stayed "present" at 0.0, the filter would have glided back up.
    glide = _run(x, np.ones((t_len, 2)))
    assert glide[15, 0, 0] < 0.69


def test_reset_reproduces_output_and_is_vectorized_per_point():
    rng = np.random.default_rng(2)
    x = rng.uniform(0, 1, size=(20, 133, 2))
    conf = (rng.uniform(size=(20, 133)) > 0.2).astype(np.float32)
    f = OneEuroFilter(fps=FPS)
    a = np.stack([f.filter(x[t], conf[t]) for t in range(20)])
    f.reset()
    b = np.stack([f.filter(x[t], conf[t]) for t in range(20)])
    np.testing.assert_array_equal(a, b)
    # Each point is filtered independently: filtering point 7 alone gives the same track.
    g = OneEuroFilter(fps=FPS)
    alone = np.stack([g.filter(x[t, 7:8], conf[t, 7:8]) for t in range(20)])
    np.testing.assert_allclose(a[:, 7:8], alone, atol=1e-12)


def test_smooth_sequence_shapes_and_confidence_passthrough():
    rng = np.random.default_rng(3)
    kp = rng.uniform(0, 1, size=(15, 133, 3)).astype(np.float32)
    kp[:, 50, 2] = 0.0
    out = smooth_sequence(kp, FPS)
    assert out.shape == kp.shape and out.dtype == np.float32
    np.testing.assert_array_equal(out[..., 2], kp[..., 2])
    np.testing.assert_array_equal(out[:, 50], kp[:, 50])  # absent point untouched
    np.testing.assert_array_equal(out[0], kp[0])  # first frame starts at the measurement
    assert not np.allclose(out[1:, :50, :2], kp[1:, :50, :2])  # others were smoothed
    # Parameters are passed through.
    loose = smooth_sequence(kp, FPS, min_cutoff=50.0)
    assert np.abs(loose - kp).max() < np.abs(out - kp).max()
    assert DEFAULT_PARAMS.to_dict() == {"min_cutoff": 1.0, "beta": 10.0, "d_cutoff": 1.0}


def test_rejects_bad_arguments():
    with pytest.raises(ValueError):
        OneEuroFilter(fps=0)
    with pytest.raises(ValueError):
        OneEuroFilter(fps=30, min_cutoff=0)
    with pytest.raises(ValueError):
        OneEuroFilter(fps=30).filter(np.zeros((5, 3)), np.ones(5))
    with pytest.raises(ValueError):
        smooth_sequence(np.zeros((4, 133, 2)), 30)
