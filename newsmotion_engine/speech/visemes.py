"""Viseme tracks: how the mouth should move, one value per video frame, for the renderers.

A :class:`VisemeTrack` holds four float32 channels in [0, 1] at a video frame rate:

- ``open``: jaw drop / lip aperture (0 closed, 1 wide open as in "father"),
- ``wide``: lip spread (the corners pulled back, as in "see"),
- ``round``: lip rounding and protrusion (as in "who", "shoe"),
- ``energy``: the speech's loudness envelope (0 silence).

Two ways to make one:

- :func:`visemes_from_phonemes` from timed phonemes (the TTS's): each eSpeak phoneme has a mouth
  target and a dominance, and the track at time t is the dominance-weighted mean of the targets,
  the coarticulation model of Cohen & Massaro (1993, "Modeling coarticulation in synthetic visual
  speech"): a lip closure for /p b m/ or the rounding of /w/ dominates its neighbours, while /h k g/
  barely move the lips and take their shape from the vowels around them.
- :func:`visemes_from_audio` from the audio alone (a user's recording): loudness for the jaw,
  the low formant region for how open, the second-formant region for spread vs rounded, and the
  share of energy above 3.5 kHz (fricatives: a narrow opening).

Both evaluate on a 200 Hz grid and average each video frame's interval, so frame ``i`` covers
``[i / fps, (i + 1) / fps)`` and a track of ``duration_s`` has :func:`frame_count` frames.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from newsmotion_engine.speech.audio import DEFAULT_SILENCE_DBFS

__all__ = [
    "CHANNELS",
    "VisemeTrack",
    "frame_count",
    "mouth_target",
    "visemes_from_phonemes",
    "visemes_from_audio",
    "audio_energy",
]

CHANNELS = ("open", "wide", "round", "energy")
_GRID_HZ = 200.0


@dataclass(frozen=True, eq=False)
class VisemeTrack:
    """Mouth shape per video frame at ``fps``: ``open``, ``wide``, ``round`` and ``energy``, each
    float32 [T] in [0, 1] (see the module docstring). ``len(track)`` is T; ``track.slice(a, b)``
    is frames a..b-1 as a track of its own."""

    fps: float
    open: np.ndarray
    wide: np.ndarray
    round: np.ndarray
    energy: np.ndarray

    def __post_init__(self) -> None:
        if not (isinstance(self.fps, (int, float)) and self.fps > 0):
            raise ValueError(f"fps must be positive, got {self.fps!r}")
        lengths = set()
        for name in CHANNELS:
            values = np.asarray(getattr(self, name), dtype=np.float32)
            if values.ndim != 1:
                raise ValueError(f"{name} must be 1-D, got shape {list(values.shape)}")
            if values.size and (not np.isfinite(values).all() or values.min() < 0.0 or values.max() > 1.0):
                raise ValueError(f"{name} must be finite and within [0, 1]")
            object.__setattr__(self, name, values)
            lengths.add(values.size)
        if len(lengths) != 1:
            raise ValueError(f"channels differ in length: {sorted(lengths)}")

    def __len__(self) -> int:
        return int(self.open.size)

    @property
    def duration_s(self) -> float:
        return len(self) / self.fps

    def slice(self, start: int, stop: int) -> VisemeTrack:
        """Frames ``start`` to ``stop - 1`` (Python slice rules)."""
        return VisemeTrack(self.fps, *(getattr(self, name)[start:stop] for name in CHANNELS))

    def stacked(self) -> np.ndarray:
        """float32 [T, 4], columns in :data:`CHANNELS` order (how the speech cache stores it)."""
        return np.stack([getattr(self, name) for name in CHANNELS], axis=1).astype(np.float32)

    @classmethod
    def from_stacked(cls, fps: float, array: np.ndarray) -> VisemeTrack:
        """The inverse of :meth:`stacked`."""
        array = np.asarray(array)
        if array.ndim != 2 or array.shape[1] != len(CHANNELS):
            raise ValueError(f"expected [T, {len(CHANNELS)}], got {list(array.shape)}")
        return cls(fps, *(array[:, i] for i in range(len(CHANNELS))))


def frame_count(duration_s: float, fps: float) -> int:
    """Video frames covering ``duration_s`` at ``fps`` (a partial last frame counts; at least 1)."""
    return max(1, math.ceil(duration_s * fps - 1e-6))


# ------------------------------------------------------------------------------ from phonemes

# Mouth targets (open, wide, round) of eSpeak's English phoneme mnemonics, after stress marks and
# modifiers are stripped. Values follow the usual viseme classes (e.g. the MPEG-4 FAP visemes).
_VOWELS: dict[str, tuple[float, float, float]] = {
    "i": (0.25, 0.85, 0.0), "I": (0.30, 0.65, 0.0), "e": (0.50, 0.60, 0.0), "E": (0.55, 0.55, 0.0),
    "a": (0.85, 0.45, 0.0), "A": (1.00, 0.30, 0.0), "@": (0.45, 0.30, 0.05), "3": (0.45, 0.25, 0.15),
    "V": (0.60, 0.30, 0.0), "0": (0.75, 0.05, 0.45), "O": (0.65, 0.0, 0.65), "o": (0.50, 0.0, 0.75),
    "U": (0.30, 0.05, 0.60), "u": (0.20, 0.0, 0.95),
}
# (open, wide, round, dominance, energy)
_CONSONANTS: dict[str, tuple[float, float, float, float, float]] = {
    "p": (0.0, 0.25, 0.0, 1.0, 0.15), "b": (0.0, 0.25, 0.0, 1.0, 0.35), "m": (0.0, 0.25, 0.0, 1.0, 0.55),
    "f": (0.08, 0.35, 0.0, 0.8, 0.30), "v": (0.08, 0.35, 0.0, 0.8, 0.45),
    "T": (0.20, 0.35, 0.0, 0.5, 0.25), "D": (0.20, 0.35, 0.0, 0.5, 0.45),
    "t": (0.15, 0.45, 0.0, 0.3, 0.20), "d": (0.15, 0.45, 0.0, 0.3, 0.35), "n": (0.15, 0.45, 0.0, 0.3, 0.55),
    "l": (0.20, 0.40, 0.0, 0.3, 0.60), "s": (0.10, 0.50, 0.0, 0.5, 0.35), "z": (0.10, 0.50, 0.0, 0.5, 0.45),
    "S": (0.15, 0.10, 0.65, 0.7, 0.35), "Z": (0.15, 0.10, 0.65, 0.7, 0.45),
    "tS": (0.12, 0.10, 0.65, 0.7, 0.30), "dZ": (0.12, 0.10, 0.65, 0.7, 0.40),
    "r": (0.20, 0.10, 0.45, 0.5, 0.60), "w": (0.10, 0.0, 0.95, 0.9, 0.60), "j": (0.20, 0.60, 0.0, 0.5, 0.60),
    "k": (0.30, 0.30, 0.0, 0.15, 0.20), "g": (0.30, 0.30, 0.0, 0.15, 0.35), "N": (0.25, 0.30, 0.0, 0.15, 0.55),
    "x": (0.30, 0.30, 0.0, 0.15, 0.25), "h": (0.40, 0.30, 0.0, 0.05, 0.25), "?": (0.20, 0.30, 0.0, 0.1, 0.1),
}
_VOWEL_DOMINANCE = 0.6
_VOWEL_ENERGY = 1.0
_REST = (0.0, 0.15, 0.0)
# eSpeak's stress and length marks and variant suffixes; none changes the mouth's class.
_STRIP = "'\",%=:;#[]-0123456789"


@dataclass(frozen=True)
class _Target:
    start_s: float
    end_s: float
    shape: tuple[float, float, float]
    dominance: float
    energy: float


def _vowel_parts(symbol: str) -> list[tuple[float, float, float]] | None:
    """Mouth targets of a vowel or diphthong (two parts: 'aI' -> a, I); None if not a vowel."""
    core = symbol.rstrip("R").replace(":", "")  # 'VR', 'IR': r-coloured vowels end near /r/
    parts = []
    i = 0
    while i < len(core):
        ch = core[i]
        if ch in _VOWELS and not (ch.isdigit() and i > 0):  # 'i@3', 'aI2': a trailing digit is a variant
            parts.append(_VOWELS[ch])
        elif ch in _STRIP:
            pass
        else:
            return None
        i += 1
    if not parts:
        return None
    if symbol.rstrip(":").endswith("R"):
        parts.append(_CONSONANTS["r"][:3])
    return parts[:3]


def mouth_target(symbol: str) -> tuple[tuple[tuple[float, float, float], ...], float, float]:
    """``(shapes, dominance, energy)`` for one eSpeak phoneme: one or more (open, wide, round)
    targets spread over the phoneme (a diphthong has two), how strongly it holds its shape against
    its neighbours, and its loudness relative to a vowel. Stressed vowels open a little more."""
    stressed = symbol.startswith("'")
    secondary = symbol.startswith(",")
    bare = symbol.lstrip("'\",%=")
    if bare.startswith("_") or not bare:
        return (_REST,), 0.4, 0.0
    vowel = _vowel_parts(bare)
    if vowel is not None:
        scale = 1.1 if stressed else 1.0 if secondary else 0.85
        shapes = tuple((min(1.0, o * scale), w, r) for o, w, r in vowel)
        return shapes, _VOWEL_DOMINANCE, _VOWEL_ENERGY
    cleaned = bare.strip(_STRIP) or bare
    for key in (cleaned[:2], cleaned[:1]):
        if key in _CONSONANTS:
            o, w, r, dominance, energy = _CONSONANTS[key]
            return ((o, w, r),), dominance, energy
    return ((0.3, 0.3, 0.0),), 0.2, 0.5  # unknown symbol: a neutral, weakly held shape


def _targets(phonemes: Iterable) -> list[_Target]:
    out = []
    for ph in phonemes:
        shapes, dominance, energy = mouth_target(ph.symbol)
        span = (ph.end_s - ph.start_s) / len(shapes)
        if span <= 0:
            continue
        # A pause longer than a breath lets the mouth come to rest; a short word gap barely does.
        if ph.symbol.lstrip("'\",%=").startswith("_"):
            dominance = 0.1 if ph.end_s - ph.start_s < 0.12 else 1.0
        for k, shape in enumerate(shapes):
            start = ph.start_s + k * span
            out.append(_Target(start, start + span, shape, dominance, energy))
    return out


def _blend(targets: list[_Target], grid: np.ndarray) -> np.ndarray:
    """Dominance-weighted mean of the targets on ``grid``: [len(grid), 4] (open, wide, round,
    energy). Each target's dominance is its weight inside its central half and decays
    exponentially outside it (time constant: a quarter of its duration plus 20 ms), so short
    phonemes blend more."""
    # A faint rest shape underneath, so a stretch no phoneme reaches is a closed, silent mouth.
    weights = np.full(grid.size, 1e-6)
    values = np.tile(np.array((*_REST, 0.0)) * 1e-6, (grid.size, 1))
    for tg in targets:
        duration = tg.end_s - tg.start_s
        centre = 0.5 * (tg.start_s + tg.end_s)
        tau = 0.25 * duration + 0.02
        reach = 8.0 * tau
        lo, hi = np.searchsorted(grid, [centre - 0.25 * duration - reach, centre + 0.25 * duration + reach])
        if hi <= lo:
            continue
        distance = np.maximum(0.0, np.abs(grid[lo:hi] - centre) - 0.25 * duration)
        dom = tg.dominance * np.exp(-distance / tau)
        values[lo:hi] += dom[:, None] * np.array((*tg.shape, tg.energy))
        weights[lo:hi] += dom
    return values / weights[:, None]


def _to_frames(grid_values: np.ndarray, grid_hz: float, frames: int, fps: float) -> np.ndarray:
    """Average the grid samples inside each video frame's interval: [frames, C]."""
    edges = np.minimum(np.round(np.arange(frames + 1) / fps * grid_hz).astype(int), grid_values.shape[0])
    out = np.zeros((frames, grid_values.shape[1]), np.float32)
    cumulative = np.concatenate([np.zeros((1, grid_values.shape[1])), np.cumsum(grid_values, axis=0)])
    for i in range(frames):
        a, b = edges[i], max(edges[i + 1], edges[i] + 1)
        b = min(b, grid_values.shape[0])
        a = min(a, b - 1)
        out[i] = (cumulative[b] - cumulative[a]) / (b - a)
    return out


def visemes_from_phonemes(phonemes: Iterable, duration_s: float, fps: float) -> VisemeTrack:
    """A :class:`VisemeTrack` at ``fps`` from timed phonemes (objects with ``start_s``, ``end_s``,
    ``symbol``: eSpeak mnemonics, as :class:`~newsmotion_engine.speech.tts.Phoneme`) over
    ``duration_s``. The energy channel comes from the phonemes' classes (vowels loudest, pauses
    silent); where the audio is at hand, :func:`audio_energy` gives the measured one.

    Example::

        speech = synthesize("Good evening.")
        track = visemes_from_phonemes(speech.phonemes, speech.duration_s, fps=30)
    """
    if duration_s <= 0:
        raise ValueError(f"duration_s must be positive, got {duration_s}")
    frames = frame_count(duration_s, fps)
    grid = (np.arange(int(math.ceil(frames / fps * _GRID_HZ))) + 0.5) / _GRID_HZ
    blended = _blend(_targets(phonemes), grid)
    values = np.clip(_to_frames(blended, _GRID_HZ, frames, fps), 0.0, 1.0)
    return VisemeTrack(float(fps), values[:, 0], values[:, 1], values[:, 2], values[:, 3])


# ------------------------------------------------------------------------------ from audio

_WINDOW_S = 0.025
# Loudness below the speech's loud frames by more than this is silence (0 energy).
_ENERGY_RANGE_DB = 45.0
_QUIETEST_LOUD_DBFS = -40.0


def _frames_stft(samples: np.ndarray, sample_rate: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """25 ms Hann windows every grid step: (power spectra [N, bins], bin frequencies, each
    window's level in dBFS [N])."""
    hop = sample_rate / _GRID_HZ
    window = int(round(_WINDOW_S * sample_rate))
    count = int(math.ceil(samples.size / hop))
    padded = np.concatenate([np.zeros(window // 2, np.float32), np.asarray(samples, np.float32),
                             np.zeros(window, np.float32)])
    starts = np.round(np.arange(count) * hop).astype(int)
    index = starts[:, None] + np.arange(window)[None, :]
    taper = np.hanning(window).astype(np.float32)
    frames = padded[index] * taper
    n_fft = 1 << (window - 1).bit_length()
    power = np.abs(np.fft.rfft(frames, n=n_fft, axis=1)) ** 2
    # Mean square of the window, undoing the taper's average gain: the signal's RMS there.
    mean_square = np.mean(frames.astype(np.float64) ** 2, axis=1) / float(np.mean(taper.astype(np.float64) ** 2))
    return power, np.fft.rfftfreq(n_fft, 1.0 / sample_rate), 10.0 * np.log10(mean_square + 1e-12)


def _loudness(level_dbfs: np.ndarray) -> np.ndarray:
    """Per-window level mapped to [0, 1]: 1 at the loud end of this speech (95th percentile), 0 at
    45 dB below it. Relative, so a quiet recording moves the mouth as much as a loud one; but the
    loud end is never taken below -40 dBFS and windows below -60 dBFS are silent, so near-silence
    stays a closed mouth."""
    ref = max(float(np.percentile(level_dbfs, 95)), _QUIETEST_LOUD_DBFS)
    relative = np.clip((level_dbfs - (ref - _ENERGY_RANGE_DB)) / _ENERGY_RANGE_DB, 0.0, 1.0)
    return np.where(level_dbfs < DEFAULT_SILENCE_DBFS, 0.0, relative)  # the loader's silence level


def _smooth(values: np.ndarray, seconds: float) -> np.ndarray:
    width = max(1, int(round(seconds * _GRID_HZ)))
    kernel = np.hanning(width + 2)[1:-1]
    kernel /= kernel.sum()
    pad = width
    padded = np.pad(values, [(pad, pad)] + [(0, 0)] * (values.ndim - 1), mode="edge")
    if values.ndim == 1:
        return np.convolve(padded, kernel, mode="same")[pad:-pad]
    return np.stack([np.convolve(padded[:, c], kernel, mode="same")[pad:-pad] for c in range(values.shape[1])], axis=1)


def _band_centroid(power: np.ndarray, freqs: np.ndarray, lo: float, hi: float) -> np.ndarray:
    band = (freqs >= lo) & (freqs < hi)
    p = power[:, band]
    return (p * freqs[band]).sum(axis=1) / (p.sum(axis=1) + 1e-12)


def audio_energy(speech, fps: float) -> np.ndarray:
    """The loudness envelope of ``speech`` (anything with ``samples`` and ``sample_rate``) per video
    frame at ``fps``: float32 [frame_count(duration, fps)] in [0, 1]."""
    samples = np.asarray(speech.samples, np.float32)
    _, _, level = _frames_stft(samples, speech.sample_rate)
    frames = frame_count(samples.size / speech.sample_rate, fps)
    envelope = _smooth(_loudness(level), 0.03)
    return np.clip(_to_frames(envelope[:, None], _GRID_HZ, frames, fps)[:, 0], 0.0, 1.0)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def visemes_from_audio(speech, fps: float) -> VisemeTrack:
    """A :class:`VisemeTrack` estimated from audio alone (``speech``: a
    :class:`~newsmotion_engine.speech.audio.Speech` or anything with ``samples`` and
    ``sample_rate``), for speech without known phonemes.

    Per 25 ms window every 5 ms: loudness (:func:`audio_energy`'s scale) drives the jaw; the power
    centroid between 250 and 1000 Hz (where the first formant lies: high for open vowels) scales how
    far; a power centroid below 4 kHz under ~800 Hz marks rounded /u o/, and a high centroid between
    900 and 2800 Hz (the second formant) spread /i e/; and the share of power above 3.5 kHz (fricatives
    /s S f/, made through a narrow opening) closes it. Voicing (the share below 1 kHz) gates
    spread and rounding, so hiss does not shape the lips. Smoothed over 40 ms (the lips cannot
    move faster), then averaged per frame.
    """
    samples = np.asarray(speech.samples, np.float32)
    rate = int(speech.sample_rate)
    if samples.size == 0:
        raise ValueError("speech has no samples")
    power, freqs, level = _frames_stft(samples, rate)
    loud = _loudness(level)
    total = power.sum(axis=1) + 1e-12
    voiced = power[:, (freqs >= 80) & (freqs < 1000)].sum(axis=1) / total
    hiss = power[:, freqs >= 3500].sum(axis=1) / total
    f1 = _band_centroid(power, freqs, 250.0, 1000.0)
    f2 = _band_centroid(power, freqs, 900.0, 2800.0)
    centroid = _band_centroid(power, freqs, 100.0, 4000.0)
    openness = np.clip((f1 - 350.0) / 350.0, 0.0, 1.0)
    opened = loud**1.5 * (0.35 + 0.65 * openness) * (1.0 - 0.7 * hiss)
    gate = loud * np.clip(voiced * 1.5, 0.0, 1.0)
    # Rounded vowels (/u o/) pile their power low: the centroid below 4 kHz drops under ~700 Hz,
    # while open /a/ and spread /i e/ sit near 1 kHz; spread vowels have a high second formant.
    rounding = _sigmoid((820.0 - centroid) / 70.0) * _sigmoid((2000.0 - f2) / 120.0)
    rounded = gate * rounding
    wide = gate * _sigmoid((f2 - 1950.0) / 150.0) * (1.0 - rounding)
    grid_values = _smooth(np.stack([opened, wide, rounded, loud], axis=1), 0.04)
    frames = frame_count(samples.size / rate, fps)
    values = np.clip(_to_frames(grid_values, _GRID_HZ, frames, fps), 0.0, 1.0)
    return VisemeTrack(float(fps), values[:, 0], values[:, 1], values[:, 2], values[:, 3])
