"""The A/B concurrency bench, dry-run on the CPU with both tiny presets: the same sides and runner
the GPU run uses (two threads here instead of two CUDA streams), labelled random weights."""

from __future__ import annotations

import pickle

import pytest

pytest.importorskip("diffusers")

from benchmarks import ab_concurrency as bench  # noqa: E402
from benchmarks.lab_record import read_lab_data  # noqa: E402


def test_bench_renders_both_tiny_models_on_two_streams(tmp_path):
    # One mode keeps the check short: each mode loads both models again, and the tiny wan-animate-2's
    # first forward on the CPU spends seconds in torch.compile (diffusers' flex-attention block mask).
    out = tmp_path / "ab.json"
    result = bench.bench_ab_concurrency("tiny", "tiny", width=64, height=128, frames=9, steps=1, modes=("streams",),
                                        device="cpu", json_path=out, log=lambda m: None)  # fmt: skip
    row = result["modes"]["streams"]
    assert row["mode"] == "streams" and not row["errors"], row
    for side in ("echomimic-v3", "wan-animate-2"):
        assert row["results"][side]["frames_out"] == 9 and row["results"][side]["segments"] == 1
        assert row["sides"][side]["render_s"] > 0 and row["sides"][side]["setup_s"] > 0
    # Both rendered at once: the mode's wall covers the slower side, not the two added up.
    assert max(s["render_s"] for s in row["sides"].values()) <= row["render_wall_s"] == result["streams_s"]
    assert "streams_vs_serial" not in result  # no serial run to compare with
    assert result["weights"] == "random weights" and set(result["modes"]) == {"streams"}
    assert read_lab_data(out)["streams_s"] == result["streams_s"]


def test_sides_pickle_for_the_processes_mode(tmp_path):
    sides = bench._sides("tiny", "tiny", 64, 128, 9, 1, "cpu", False, tmp_path)
    assert [s.label for s in pickle.loads(pickle.dumps(sides))] == ["echomimic-v3", "wan-animate-2"]
    assert sides[1].options["segment_frames"] == 9  # one segment of the least 4k+1 holding the clip


def test_unknown_modes_are_refused():
    with pytest.raises(ValueError, match="use serial, streams, processes"):
        bench.bench_ab_concurrency("tiny", "tiny", modes=("threads",))
