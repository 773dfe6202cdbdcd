"""The SimHash bench's arithmetic: the sweep rows from per-speech stats, the threshold rule, and
the replaying encoder that lets each threshold skip recomputing outputs."""

import numpy as np

from benchmarks.simhash import ReplayEncoder, choose_threshold, sweep_rows


def _stats(windows, hits, exact, hash_s, lookup_s, distance=None):
    return {"windows": windows, "hits": hits, "exact_hits": exact, "hash_s": hash_s, "lookup_s": lookup_s,
            "reuse_cosine_distance": {"mean": distance, "max": distance + 0.1, "windows": hits} if hits else None}


def test_sweep_rows_net_the_overhead_of_every_window_against_the_hits():
    rows = sweep_rows({0: [_stats(10, 2, 2, 0.010, 0.010, 0.1), _stats(10, 0, 0, 0.010, 0.010)],
                       8: [_stats(10, 4, 2, 0.010, 0.010, 0.2), _stats(10, 4, 0, 0.010, 0.010, 0.5)]}, encoder_ms_per_window=100.0)
    zero, eight = rows
    assert zero["hit_rate"] == 0.1 and zero["hits"] == 2 and zero["exact_hits"] == 2
    # 40 ms of hashing and lookups over 2 hits: 100 - 20 ms saved per hit; 0.2 s - 0.04 s in all
    assert zero["ms_saved_per_hit"] == 80.0 and zero["seconds_saved"] == 0.16
    assert zero["reuse_cosine_distance"] == 0.1 and zero["overhead_ms_per_window"] == 2.0
    assert eight["reuse_cosine_distance"] == 0.35  # weighted by the hits of each speech
    assert eight["reuse_cosine_distance_max"] == 0.6


def test_the_chosen_threshold_is_the_largest_within_tolerance():
    rows = [{"max_distance": 0, "reuse_cosine_distance": 0.05}, {"max_distance": 4, "reuse_cosine_distance": 0.15},
            {"max_distance": 8, "reuse_cosine_distance": 0.3}, {"max_distance": 12, "reuse_cosine_distance": 0.19}]
    assert choose_threshold(rows, unrelated=0.8, tolerance=0.25) == 12
    assert choose_threshold(rows, unrelated=0.4, tolerance=0.25) == 0
    assert choose_threshold([{"max_distance": 0, "reuse_cosine_distance": 0.5}], unrelated=0.8) == 0


def test_the_replay_encoder_computes_each_window_once():
    calls = []

    class Encoder:
        weights_label = "random weights"

        def encode(self, window):
            calls.append(1)
            return window[:, None] * 2

    replay = ReplayEncoder(Encoder())
    a, b = np.ones(4, np.float32), np.zeros(4, np.float32)
    first = replay.encode(a)
    np.testing.assert_array_equal(replay.encode(a.copy()), first)
    replay.encode(b)
    assert len(calls) == 2 and replay.computed == 2 and replay.weights_label == "random weights"
