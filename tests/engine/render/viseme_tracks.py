"""Viseme tracks for the render tests: curves given frame by frame, and a speech-like track."""

from __future__ import annotations

import numpy as np

from newsmotion_engine.speech.visemes import VisemeTrack


def track(open_, wide=None, round_=None, energy=None, fps: float = 30.0) -> VisemeTrack:
    """A track from per-frame curves (``wide``/``round`` default to 0, ``energy`` to ``open``)."""
    o = np.asarray(open_, np.float32)
    zero = np.zeros_like(o)
    return VisemeTrack(
        fps=float(fps),
        open=o,
        wide=zero if wide is None else np.asarray(wide, np.float32),
        round=zero if round_ is None else np.asarray(round_, np.float32),
        energy=o.copy() if energy is None else np.asarray(energy, np.float32),
    )


def speaking(frames: int, fps: float = 30.0, seed: int = 0) -> VisemeTrack:
    """A speech-like track: syllables at about 4 Hz with random depth, pauses, some wide and round."""
    rng = np.random.default_rng(seed)
    t = np.arange(frames) / fps
    phase = 2 * np.pi * 4.2 * t + rng.uniform(0, 2 * np.pi)
    depth = np.repeat(rng.uniform(0.3, 1.0, frames // 7 + 1), 7)[:frames]
    o = np.clip(np.sin(phase), 0, None) ** 1.5 * depth
    pause = (np.sin(2 * np.pi * 0.35 * t) > 0.85)
    o[pause] = 0
    wide = np.clip(np.sin(phase * 0.5), 0, None) * 0.6 * (o > 0.1)
    rnd = np.clip(-np.sin(phase * 0.5), 0, None) * 0.6 * (o > 0.1)
    return track(o, wide, rnd, np.clip(o * 1.1, 0, 1), fps)
