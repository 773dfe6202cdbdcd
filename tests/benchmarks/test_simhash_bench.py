"""The SimHash bench's arithmetic: the sweep rows from per-speech stats, the threshold rule, and
the replaying encoder that lets each threshold skip recomputing outputs."""

import numpy as np
import pytest

from benchmarks.simhash import ReplayEncoder, choose_threshold, error_limit, sweep_rows


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


def test_the_chosen_threshold_keeps_nearly_all_of_exact_hashings_advantage():
    rows = [{"max_distance": 0, "reuse_cosine_distance": 0.4}, {"max_distance": 2, "reuse_cosine_distance": 0.38},
            {"max_distance": 4, "reuse_cosine_distance": 0.45}, {"max_distance": 8, "reuse_cosine_distance": 0.6},
            {"max_distance": 12, "reuse_cosine_distance": None}]
    # limit: 0.4 + 0.1 * (0.8 - 0.4) = 0.44
    assert error_limit(rows, unrelated=0.8) == pytest.approx(0.44)
    assert choose_threshold(rows, unrelated=0.8) == 12  # no hits at 12: nothing reused, nothing lost
    assert choose_threshold(rows[:4], unrelated=0.8) == 2
    assert choose_threshold(rows[:4], unrelated=0.9) == 4  # 0.4 + 0.05 = 0.45
    no_exact_hits = [{"max_distance": 0, "reuse_cosine_distance": None}, {"max_distance": 2, "reuse_cosine_distance": 0.1}]
    assert error_limit(no_exact_hits, unrelated=0.8) == pytest.approx(0.08)
    assert choose_threshold(no_exact_hits, unrelated=0.8) == 0


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


def test_the_default_threshold_is_the_one_the_committed_sweep_chose():
    from newsmotion_engine.bench.record import RESULTS_DIR, read_result
    from newsmotion_engine.speech.features import DEFAULT_MAX_DISTANCE

    data = read_result(RESULTS_DIR / "simhash_cpu.json").data
    assert choose_threshold(data["sweep"], data["unrelated_window_cosine_distance"], data["tolerance"]) == data["chosen_max_distance"]
    assert DEFAULT_MAX_DISTANCE == data["chosen_max_distance"]
    from newsmotion_engine.speech.samples import SAMPLE_SPEECHES

    assert data["weights"] == "random weights" and data["speeches"] == list(SAMPLE_SPEECHES)  # measured on the samples


def test_the_bench_runs_end_to_end_on_a_tiny_model_folder(tmp_path):
    import scipy.io.wavfile

    from benchmarks.simhash import main
    from newsmotion_engine.bench.record import read_result
    from newsmotion_engine.speech.features import AudioEncoder

    tiny = {"hidden_size": 16, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 32,
            "conv_dim": [8] * 7, "num_conv_pos_embeddings": 8, "num_conv_pos_embedding_groups": 2}
    AudioEncoder.load(config_overrides=tiny).model.save_pretrained(tmp_path / "tiny-wav2vec2")
    rng = np.random.default_rng(0)
    t = np.arange(16000 * 2) / 16000
    voice = 0.1 * np.sin(2 * np.pi * 220 * t) * (0.5 + 0.5 * np.sin(2 * np.pi * 3 * t)) + rng.normal(0, 0.005, t.size)
    pause = np.zeros(4000)
    for name in ("a", "b"):  # b repeats a: its windows hit a's
        scipy.io.wavfile.write(tmp_path / f"{name}.wav", 16000, np.concatenate([pause, voice, pause]).astype(np.float32))
    out, png = tmp_path / "simhash_test.json", tmp_path / "curve.png"
    assert main(["--model", str(tmp_path / "tiny-wav2vec2"), "--wav", str(tmp_path / "a.wav"), str(tmp_path / "b.wav"),
                 "--thresholds", "4,0", "--json", str(out), "--chart", str(png)]) == 0
    result = read_result(out)
    data = result.data
    assert result.weights == "model folder tiny-wav2vec2" and data["speeches"] == ["a", "b"]
    assert [r["max_distance"] for r in data["sweep"]] == [0, 4]
    exact = data["sweep"][0]
    assert exact["hits"] >= exact["windows"] // 2 and exact["reuse_cosine_distance"] < 1e-6  # b is a again, to the sample
    assert png.stat().st_size > 1000
