"""The clip benchmark renders through the shipped path (render_queue -> render_clip -> the
backend's stages) with sparse keyframes, on the tiny preset (CPU, random weights)."""

from __future__ import annotations


from benchmarks import clip as clip_bench
from benchmarks.lab_record import read_lab_data  # noqa: E402
from newsmotion_engine.render import clip as clip_mod
from newsmotion_engine.render import queue as queue_mod


def test_clip_bench_renders_through_the_queue_and_render_clip(tmp_path, monkeypatch):
    calls = {"queue": 0, "clip": []}
    real_queue, real_clip = queue_mod.render_queue, clip_mod.render_clip

    def spy_queue(*a, **k):
        calls["queue"] += 1
        return real_queue(*a, **k)

    def spy_clip(guidance, persona, backend, spec, out, **k):
        calls["clip"].append(spec.keyframes)
        return real_clip(guidance, persona, backend, spec, out, **k)

    monkeypatch.setattr(queue_mod, "render_queue", spy_queue)
    monkeypatch.setattr(queue_mod, "render_clip", spy_clip)
    out = tmp_path / "clip.json"
    result = clip_bench.bench_clip("tiny", parts=("ours", "queue"), variants=["keyframes_1to3"], width=64, height=128, frames=12,
                                   steps=1, batch=2, json_path=out, log=lambda m: None)  # fmt: skip
    row = result["ours"]["keyframes_1to3"]
    assert "error" not in row, row
    assert row["frames_out"] == 12 and row["infill"]["keyframes"] == 4 and row["infill"]["infilled"] == 8
    assert result["clip_120f_720p_s"] == row["end_to_end_s"] and result["weights"] == "random weights"
    assert result["queue"]["serial"]["clips"] == 2 and result["queue"]["pipelined"]["clips"] == 2
    assert calls["queue"] >= 4 and set(calls["clip"]) == {3}  # every render went through the queue and render_clip
    assert read_lab_data(out)["ours"]["keyframes_1to3"]["frames_out"] == 12
