"""The warp benchmark runs end to end on a tiny synthetic pair and reports its stages."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from newsmotion_engine.bench.warp import bench_warp


def _synthetic():
    # The drawn-figure fixtures live with the render tests; load them by path (no packages).
    path = Path(__file__).resolve().parents[1] / "render" / "conftest.py"
    spec = importlib.util.spec_from_file_location("_render_fixtures", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def test_bench_warp_reports_fps_and_stages():
    fx = _synthetic()
    loop = fx.make_loop(8)
    persona = fx.make_persona(216, 384)
    res = bench_warp(loop, persona, frames=10, width=216, height=384, threads=1, repeats=2)
    assert res["benchmark"] == "warp" and res["frames"] == 10
    assert res["fps"] > 0 and res["fps"] >= res["fps_median"] > 0 and len(res["fps_runs"]) == 2
    assert res["render_only_fps"] > 0
    for stage in ("retarget", "field", "remap", "composite", "arms", "encode"):
        assert res["stages_ms"][stage] >= 0
    assert res["field_ms"] > 0 and res["remap_ms"] > 0 and res["encode_ms"] > 0
    assert res["arms_ms"] > 0  # the drawn figure's arms are layers
    assert res["backend_info"]["last_render"]["parts"]["not_animated"] == {}
    assert res["encoder"] in ("libx264", "h264_nvenc")
    assert res["meets_floor"] == (res["fps"] >= 30)
    speaking = res["speaking"]  # the same clip with the sample speech's lips
    assert len(speaking["fps_runs"]) == 2 and speaking["fps"] > 0 and speaking["render_only_fps"] > 0
    assert speaking["face_ms"] >= 0 and speaking["face"]["frames"] == 10
