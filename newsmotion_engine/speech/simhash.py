"""The audio-encoder bypass: SimHash of log-mel windows and a persistent cache of encoder output.

Conversational speech repeats itself acoustically (pauses, breaths, sign-offs), so an encoder
window whose log-mel frames are near-identical to one already encoded can reuse the stored
encoder output instead of running the encoder again.

- :func:`log_mel` turns 16 kHz samples into ``[frames, n_mels]`` log-mel frames (numpy FFT, a
  Hann window, an HTK-scale triangular mel filterbank built here).
- :class:`SimHasher` projects a window of log-mel frames onto ``n_bits`` random hyperplanes
  drawn from a fixed seed; each bit is the sign of one projection. Windows at a small angle to
  each other get hashes at a small Hamming distance.
- :class:`EncoderCache` stores encoder output by hash on disk and returns the stored output of
  the nearest hash within ``max_distance`` bits (0 = exact hashing).

Cache layout (one folder)::

    meta.json               {"format": 1, "n_bits": 64, "params": {...}}: the hashing set-up
    entries/<hash>.npy      one entry per hash: the encoder output, saved with numpy.save;
                            <hash> is the hash in lower-case hex, zero-padded to n_bits/4 digits

The entry file names are the index (read by listing ``entries/`` on open), so there is no index
file to fall out of step with the entries. Writes go to a temporary file in the same folder and
are moved into place with ``os.replace``, so a reader sees a whole entry or none. A cache whose
``meta.json`` disagrees with the hashing set-up asked for (other ``n_bits`` or ``params``, e.g. other
hyperplanes or another encoder) is refused, never reused. A corrupt entry is reported with a
warning naming its file and counted as a miss.

Near-duplicate lookup uses multi-index hashing: the hash is cut into ``max_distance + 1``
contiguous bands and every entry is bucketed under each of its bands. Two hashes within
``max_distance`` bits differ in at most ``max_distance`` bands, so by pigeonhole they agree exactly
on at least one band: the union of the query's buckets holds every true neighbour, and only
those candidates are checked, not the whole cache. The result equals a brute-force scan.
"""

from __future__ import annotations

import io
import json
import os
import re
import tempfile
import warnings
from pathlib import Path

import numpy as np

from newsmotion_engine.errors import CacheCorruptError, CacheStaleError

CACHE_FORMAT = 1


def hz_to_mel(hz: np.ndarray | float) -> np.ndarray:
    """HTK mel scale."""
    return 2595.0 * np.log10(1.0 + np.asarray(hz, dtype=np.float64) / 700.0)


def mel_to_hz(mel: np.ndarray | float) -> np.ndarray:
    return 700.0 * (10.0 ** (np.asarray(mel, dtype=np.float64) / 2595.0) - 1.0)


def mel_filterbank(n_mels: int, n_fft: int, sample_rate: int, fmin: float = 0.0, fmax: float | None = None) -> np.ndarray:
    """``[n_mels, n_fft // 2 + 1]`` triangular filters, equally spaced on the mel scale, peak 1."""
    fmax = sample_rate / 2.0 if fmax is None else fmax
    bin_hz = np.linspace(0.0, sample_rate / 2.0, n_fft // 2 + 1)
    edges_hz = mel_to_hz(np.linspace(hz_to_mel(fmin), hz_to_mel(fmax), n_mels + 2))
    lower, centre, upper = edges_hz[:-2, None], edges_hz[1:-1, None], edges_hz[2:, None]
    rising = (bin_hz[None, :] - lower) / (centre - lower)
    falling = (upper - bin_hz[None, :]) / (upper - centre)
    return np.clip(np.minimum(rising, falling), 0.0, None)


def log_mel(samples: np.ndarray, sample_rate: int = 16000, n_mels: int = 80, hop: int = 320, win: int = 400) -> np.ndarray:
    """``[frames, n_mels]`` float32 natural-log mel power. One frame per ``hop`` samples (320 at
    16 kHz is 50 Hz, the audio encoders' frame rate) over ``win`` samples; no padding, so a clip
    shorter than ``win`` has 0 frames. The power is floored at 1e-10 so silence stays finite."""
    samples = np.asarray(samples, dtype=np.float32).reshape(-1)
    n_fft = 1 << max(0, (win - 1).bit_length())
    if samples.size < win:
        return np.zeros((0, n_mels), dtype=np.float32)
    count = 1 + (samples.size - win) // hop
    starts = np.arange(count)[:, None] * hop
    frames = samples[starts + np.arange(win)[None, :]] * np.hanning(win).astype(np.float32)
    power = np.abs(np.fft.rfft(frames, n=n_fft, axis=1)) ** 2
    mel = power @ mel_filterbank(n_mels, n_fft, sample_rate).T
    return np.log(np.maximum(mel, 1e-10)).astype(np.float32)


def hamming(a: int, b: int) -> int:
    """Number of differing bits between two hashes."""
    return (a ^ b).bit_count()


class SimHasher:
    """Random-hyperplane SimHash of a log-mel window of ``dims`` values (frames x n_mels).

    Each window is mean-centred (its own mean over all frames and bands subtracted) before the
    projection. A gain change multiplies the mel power by a constant, which adds the same constant
    to every log-mel value; centring removes it, so a louder or quieter take of the same sound
    keeps its bits. Without centring that common offset would also dominate every projection and
    make the bits track overall loudness instead of spectral shape."""

    def __init__(self, n_bits: int = 64, *, dims: int, seed: int = 0):
        if n_bits < 1 or dims < 1:
            raise ValueError(f"n_bits and dims must be positive, got {n_bits} and {dims}")
        self.n_bits = n_bits
        self.dims = dims
        self.seed = seed
        self.hyperplanes = np.random.default_rng(seed).standard_normal((n_bits, dims)).astype(np.float64)

    @property
    def params(self) -> dict:
        """What fixes the hash function; a cache stores it to refuse other hyperplanes."""
        return {"hasher": "simhash-hyperplanes", "n_bits": self.n_bits, "dims": self.dims, "seed": self.seed}

    def hash(self, window: np.ndarray) -> int:
        values = np.asarray(window, dtype=np.float64).reshape(-1)
        if values.size != self.dims:
            raise ValueError(f"window has {values.size} values, the hasher expects {self.dims}")
        bits = (self.hyperplanes @ (values - values.mean())) > 0
        value = 0
        for bit in np.flatnonzero(bits):
            value |= 1 << int(bit)
        return value


def _band_slices(n_bits: int, n_bands: int) -> list[tuple[int, int]]:
    """``(shift, width)`` of ``n_bands`` contiguous bands covering ``n_bits``, widths differing by
    at most one."""
    base, extra = divmod(n_bits, n_bands)
    slices, shift = [], 0
    for band in range(n_bands):
        width = base + (1 if band < extra else 0)
        slices.append((shift, width))
        shift += width
    return slices


class EncoderCache:
    """Persistent encoder-output cache keyed by SimHash (layout and lookup in the module docstring).

    ``get(window_hash)`` returns the stored features of the nearest stored hash within
    ``max_distance`` bits (ties go to the smaller hash) or None; ``put(window_hash, features)``
    stores them. ``hits`` and ``misses`` count ``get`` outcomes."""

    def __init__(self, folder: Path | str, *, n_bits: int = 64, max_distance: int = 0, params: dict | None = None):
        if not 0 <= max_distance < n_bits:
            raise ValueError(f"max_distance must be in [0, {n_bits}), got {max_distance}")
        self.folder = Path(folder)
        self.entries_dir = self.folder / "entries"
        self.n_bits = n_bits
        self.max_distance = max_distance
        self.params = dict(params or {})
        self.hits = 0
        self.misses = 0
        self._hex_digits = (n_bits + 3) // 4
        self._entry_name = re.compile(rf"^[0-9a-f]{{{self._hex_digits}}}\.npy$")
        self._bands = _band_slices(n_bits, max_distance + 1)
        self._buckets: list[dict[int, set[int]]] = [{} for _ in self._bands]
        self._hashes: set[int] = set()
        self._open()

    # -- set-up ---------------------------------------------------------------------------------

    def _open(self) -> None:
        self.entries_dir.mkdir(parents=True, exist_ok=True)
        meta_path = self.folder / "meta.json"
        wanted = {"format": CACHE_FORMAT, "n_bits": self.n_bits, "params": self.params}
        if meta_path.exists():
            try:
                found = json.loads(meta_path.read_text())
            except (OSError, ValueError) as exc:
                raise CacheCorruptError(meta_path, f"unreadable encoder-cache metadata ({exc})") from exc
            if found != wanted:
                raise CacheStaleError(self.folder, f"encoder cache was built with {found}, not {wanted}; "
                                                   "use another folder or delete this one")
        else:
            self._write_atomic(meta_path, json.dumps(wanted, sort_keys=True).encode())
        for path in self.entries_dir.iterdir():
            if self._entry_name.match(path.name):
                self._index(int(path.stem, 16))

    def _index(self, window_hash: int) -> None:
        self._hashes.add(window_hash)
        for buckets, key in zip(self._buckets, self._band_keys(window_hash)):
            buckets.setdefault(key, set()).add(window_hash)

    def _unindex(self, window_hash: int) -> None:
        self._hashes.discard(window_hash)
        for buckets, key in zip(self._buckets, self._band_keys(window_hash)):
            buckets.get(key, set()).discard(window_hash)

    def _band_keys(self, window_hash: int) -> list[int]:
        return [(window_hash >> shift) & ((1 << width) - 1) for shift, width in self._bands]

    def _write_atomic(self, target: Path, payload: bytes) -> None:
        # Same folder as the target, so os.replace is a rename on one file system.
        handle = tempfile.NamedTemporaryFile(dir=target.parent, prefix=".tmp-", suffix=".part", delete=False)
        try:
            with handle:
                handle.write(payload)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(handle.name, target)
        except BaseException:
            Path(handle.name).unlink(missing_ok=True)
            raise

    # -- lookup ---------------------------------------------------------------------------------

    def entry_path(self, window_hash: int) -> Path:
        return self.entries_dir / f"{window_hash:0{self._hex_digits}x}.npy"

    def _check_hash(self, window_hash: int) -> None:
        if not 0 <= window_hash < (1 << self.n_bits):
            raise ValueError(f"hash {window_hash:#x} does not fit in {self.n_bits} bits")

    def neighbours(self, window_hash: int) -> list[int]:
        """Stored hashes within ``max_distance`` bits, nearest first (then by value), found
        through the band buckets."""
        self._check_hash(window_hash)
        candidates: set[int] = set()
        for buckets, key in zip(self._buckets, self._band_keys(window_hash)):
            candidates |= buckets.get(key, set())
        near = [(hamming(window_hash, other), other) for other in candidates]
        return [other for distance, other in sorted(near) if distance <= self.max_distance]

    def get(self, window_hash: int) -> np.ndarray | None:
        found = self.nearest(window_hash)
        return None if found is None else found[1]

    def nearest(self, window_hash: int) -> tuple[int, np.ndarray] | None:
        """``(stored hash, its features)`` of the nearest readable entry within ``max_distance``
        bits, or None; counted as a hit or a miss like :meth:`get`."""
        for stored in self.neighbours(window_hash):
            path = self.entry_path(stored)
            try:
                features = np.load(path, allow_pickle=False)
            except (OSError, ValueError, EOFError) as exc:
                warnings.warn(f"{path}: corrupt encoder-cache entry ({exc}); treated as a miss", stacklevel=2)
                # Forget it so the warning is not repeated; a later put of this hash replaces the file.
                self._unindex(stored)
                continue
            self.hits += 1
            return stored, features
        self.misses += 1
        return None

    def put(self, window_hash: int, features: np.ndarray) -> None:
        self._check_hash(window_hash)
        buffer = io.BytesIO()
        np.save(buffer, np.asarray(features), allow_pickle=False)
        self._write_atomic(self.entry_path(window_hash), buffer.getvalue())
        self._index(window_hash)

    # -- counters -------------------------------------------------------------------------------

    @property
    def hit_rate(self) -> float:
        total = self.hits + self.misses
        return self.hits / total if total else 0.0

    def __len__(self) -> int:
        return len(self._hashes)

    def __contains__(self, window_hash: int) -> bool:
        return window_hash in self._hashes

