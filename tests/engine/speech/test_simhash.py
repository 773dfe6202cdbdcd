"""SimHash of log-mel windows and the persistent encoder cache: hash stability, near-duplicate
lookup, persistence, corrupt entries, and banded lookup equal to a brute-force scan."""

import json

import numpy as np
import pytest

from newsmotion_engine.errors import CacheStaleError
from newsmotion_engine.speech.simhash import EncoderCache, SimHasher, hamming, log_mel, mel_filterbank

FRAMES, MELS = 8, 80


def _speechlike(seed, seconds=0.5):
    """A harmonic signal with a random pitch and formant-like envelope, plus a little noise."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(16000 * seconds)) / 16000
    pitch = rng.uniform(90, 250)
    signal = sum(rng.uniform(0.1, 1.0) / k * np.sin(2 * np.pi * pitch * k * t) for k in range(1, 30) if pitch * k < 7800)
    return (0.1 * signal / np.max(np.abs(signal)) + 0.001 * rng.standard_normal(t.size)).astype(np.float32)


def _window(samples):
    return log_mel(samples)[:FRAMES]


def test_log_mel_shape_and_the_filterbank_covers_the_band():
    frames = log_mel(np.zeros(16000, dtype=np.float32))
    assert frames.shape == (1 + (16000 - 400) // 320, 80) and frames.dtype == np.float32
    assert np.isfinite(frames).all()
    assert log_mel(np.zeros(399)).shape == (0, 80)
    bank = mel_filterbank(80, 512, 16000)
    assert bank.shape == (80, 257) and bank.max() <= 1.0 + 1e-9
    # Every mel band has some weight, and a 1 kHz tone peaks in the band centred nearest 1 kHz.
    assert (bank.sum(axis=1) > 0).all()
    tone = np.sin(2 * np.pi * 1000 * np.arange(16000) / 16000).astype(np.float32)
    centres = bank.argmax(axis=1) * 16000 / 512
    assert abs(centres[log_mel(tone).mean(axis=0).argmax()] - 1000) < 100


def test_identical_windows_hash_equal_and_a_gain_change_keeps_the_bits():
    hasher = SimHasher(64, dims=FRAMES * MELS, seed=0)
    samples = _speechlike(1)
    assert hasher.hash(_window(samples)) == hasher.hash(_window(samples.copy()))
    # +12 dB adds a constant to every log-mel value, which the per-window mean-centring removes.
    assert hamming(hasher.hash(_window(samples)), hasher.hash(_window(samples * 4.0))) <= 1


def test_a_noised_copy_stays_near_while_unrelated_windows_are_far():
    hasher = SimHasher(64, dims=FRAMES * MELS, seed=0)
    rng = np.random.default_rng(123)
    near, far = [], []
    for seed in range(10):
        samples = _speechlike(seed)
        noised = samples + 0.001 * rng.standard_normal(samples.size).astype(np.float32)
        base = hasher.hash(_window(samples))
        near.append(hamming(base, hasher.hash(_window(noised))))
        far.append(hamming(base, hasher.hash(_window(_speechlike(seed + 100)))))
    # Noise about 30 dB below the signal moves a few bits; a different voice and pitch moves many.
    assert max(near) <= 5
    assert min(far) > max(near) and np.mean(far) >= 15


def test_hasher_is_fixed_by_its_seed_and_checks_the_window_size():
    window = _window(_speechlike(3))
    assert SimHasher(64, dims=FRAMES * MELS, seed=7).hash(window) == SimHasher(64, dims=FRAMES * MELS, seed=7).hash(window)
    assert SimHasher(64, dims=FRAMES * MELS, seed=7).hash(window) != SimHasher(64, dims=FRAMES * MELS, seed=8).hash(window)
    with pytest.raises(ValueError, match="expects 640"):
        SimHasher(64, dims=FRAMES * MELS).hash(window[:4])


def test_cache_returns_a_near_duplicate_within_the_radius_and_misses_outside(tmp_path):
    cache = EncoderCache(tmp_path / "cache", max_distance=3)
    stored = 0x0123_4567_89AB_CDEF
    features = np.arange(12, dtype=np.float32).reshape(3, 4)
    cache.put(stored, features)
    assert np.array_equal(cache.get(stored ^ 0b1011), features)  # 3 bits away
    assert cache.get(stored ^ 0b11011) is None  # 4 bits away
    assert (cache.hits, cache.misses, cache.hit_rate) == (1, 1, 0.5)


def test_exact_hashing_with_radius_zero(tmp_path):
    cache = EncoderCache(tmp_path / "cache", max_distance=0)
    cache.put(42, np.ones(3))
    assert cache.get(42) is not None and cache.get(43) is None


def test_the_nearest_entry_wins(tmp_path):
    cache = EncoderCache(tmp_path / "cache", max_distance=4)
    cache.put(0b1111, np.full(2, 4.0))
    cache.put(0b0001, np.full(2, 1.0))
    assert cache.get(0b0000)[0] == 1.0


def test_cache_survives_a_reopen_and_refuses_other_hashing_params(tmp_path):
    folder = tmp_path / "cache"
    params = SimHasher(64, dims=FRAMES * MELS, seed=0).params
    first = EncoderCache(folder, max_distance=2, params=params)
    first.put(0xFEED, np.linspace(0, 1, 5))
    reopened = EncoderCache(folder, max_distance=2, params=params)
    assert len(reopened) == 1 and 0xFEED in reopened
    assert np.allclose(reopened.get(0xFEED ^ 0b10), np.linspace(0, 1, 5))
    assert json.loads((folder / "meta.json").read_text())["params"]["seed"] == 0
    assert sorted(p.name for p in (folder / "entries").iterdir()) == ["000000000000feed.npy"]
    with pytest.raises(CacheStaleError, match="built with"):
        EncoderCache(folder, max_distance=2, params=SimHasher(64, dims=FRAMES * MELS, seed=1).params)


def test_a_corrupt_entry_is_a_miss_with_a_warning_naming_the_file(tmp_path):
    cache = EncoderCache(tmp_path / "cache", max_distance=1)
    cache.put(7, np.ones(4))
    path = cache.entry_path(7)
    path.write_bytes(b"\x93NUMPY garbage")
    with pytest.warns(UserWarning, match=str(path)):
        assert cache.get(7) is None
    assert cache.misses == 1
    cache.put(7, np.zeros(4))  # a fresh put replaces the corrupt file
    assert np.array_equal(cache.get(7), np.zeros(4))


def test_banded_lookup_finds_the_same_neighbours_as_a_brute_force_scan(tmp_path):
    rng = np.random.default_rng(5)
    stored = [int(v) for v in rng.integers(0, 2**63, size=300, dtype=np.uint64)]
    # Plant near-duplicates so there are neighbours to find at every distance up to the radius.
    queries = [h ^ int(sum(1 << int(b) for b in rng.choice(64, size=rng.integers(0, 7), replace=False)))
               for h in stored[:100]] + [int(v) for v in rng.integers(0, 2**63, size=50, dtype=np.uint64)]
    for radius in (0, 2, 5):
        cache = EncoderCache(tmp_path / f"cache{radius}", max_distance=radius)
        for h in stored:
            cache.put(h, np.zeros(1, dtype=np.float32))
        found_any = 0
        for query in queries:
            brute = sorted((hamming(query, h), h) for h in stored if hamming(query, h) <= radius)
            assert cache.neighbours(query) == [h for _, h in brute]
            found_any += bool(brute)
        assert found_any >= 10


def test_the_banding_checks_fewer_candidates_than_the_whole_cache(tmp_path):
    cache = EncoderCache(tmp_path / "cache", max_distance=3)
    rng = np.random.default_rng(9)
    for h in rng.integers(0, 2**63, size=400, dtype=np.uint64):
        cache.put(int(h), np.zeros(1))
    bucket_sizes = [len(cache._buckets[band].get(key, ())) for band, key in enumerate(cache._band_keys(12345))]
    assert sum(bucket_sizes) < len(cache) / 4
