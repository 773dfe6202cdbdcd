"""The clip benchmark renders through the shipped path (render_clip -> the backend's frames) with
sparse keyframes, on the tiny preset (CPU, random weights)."""

from __future__ import annotations


from benchmarks import clip as clip_bench
from benchmarks.lab_record import read_lab_data  # noqa: E402
from newsmotion_engine.render import clip as clip_mod


def test_clip_bench_renders_through_render_clip(tmp_path, monkeypatch):
    calls = []
    real_clip = clip_mod.render_clip

    def spy_clip(guidance, persona, backend, spec, out, **k):
        calls.append(spec.keyframes)
        return real_clip(guidance, persona, backend, spec, out, **k)

    monkeypatch.setattr(clip_mod, "render_clip", spy_clip)
    out = tmp_path / "clip.json"
    result = clip_bench.bench_clip("tiny", parts=("ours",), variants=["keyframes_1to3"], width=64, height=128, frames=12,
                                   steps=1, json_path=out, log=lambda m: None)  # fmt: skip
    row = result["ours"]["keyframes_1to3"]
    assert "error" not in row, row
    assert row["frames_out"] == 12 and row["infill"]["keyframes"] == 4 and row["infill"]["infilled"] == 8
    assert result["clip_120f_720p_s"] == row["end_to_end_s"] and result["weights"] == "random weights"
    assert calls == [3, 3]  # the warm-up and the timed render, both through render_clip
    assert read_lab_data(out)["ours"]["keyframes_1to3"]["frames_out"] == 12
