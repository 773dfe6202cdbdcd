"""The scorecard charts: which numbers each one draws, and the nightly history it reads."""

import json
import os

from newsmotion_engine.studio import charts as C

from .conftest import make_render


def _write(path, data):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


def test_speedups_take_every_variant_and_leave_toy_presets_out(tmp_path):
    _write(tmp_path / "gpu_forward_14b_h200.json", {"preset": "14b", "forward": {"variants": {
        "stock_bf16": {"forward_ms": 12.0}, "all": {"speedup_vs_stock": 1.45}, "fp8": {"speedup_vs_stock": 0.96}}},
        "forward_speedup_vs_stock": 1.45})  # fmt: skip
    _write(tmp_path / "gpu_smoke_h200.json", {"preset": "smoke", "forward": {"variants": {"all": {"speedup_vs_stock": 28.0}}}})
    _write(tmp_path / "gpu_attn_render_14b_h200.json", {"preset": "14b", "render": {"variants": {"all": {"speedup_vs_stock": 2.0}}}})
    results = C.load_bench_results(tmp_path)
    assert C.speedup_bars(results) == [("attn_render render · all", 2.0), ("forward · all", 1.45), ("forward · fp8", 0.96)]
    chart = C.speedup_chart(results)
    assert chart is not None and chart.svg.startswith("<svg") and chart.png.startswith(b"\x89PNG")
    assert C.speedup_chart([]) is None
    assert C.speedup_chart(C.load_bench_results(tmp_path / "none")) is None


def test_stage_chart_from_telemetry(storage):
    records = [make_render(storage, "anna", "nod", "warp"), make_render(storage, "anna", "nod", "wan-animate")]
    chart = C.stage_seconds_chart(records)
    assert chart.name == "stages" and "<svg" in chart.svg
    assert C.stage_seconds_chart([]) is None


def test_history_keeps_runs_and_adds_an_older_latest_file(storage):
    _write(storage.bench_history_dir / "warp" / "2026-11-30T020000Z.json", {"fps": 100.0})
    _write(storage.bench_history_dir / "warp" / "2026-12-01T020000Z.json", {"fps": 110.0})
    _write(storage.bench_dir / "warp.json", {"fps": 110.0})  # the latest run: already in the history
    _write(storage.bench_dir / "persona.json", {"load_ms_p50": 1.0, "build_s": 1.3})  # from before history was kept
    os.utime(storage.bench_dir / "persona.json", (1_700_000_000, 1_700_000_000))
    history = C.bench_history(storage)
    assert [p[1]["fps"] for p in history["warp"]] == [100.0, 110.0]
    assert len(history["persona"]) == 1 and "guidance" not in history
    chart = C.trend_chart(history)
    assert chart is not None and "up to 2 per suite" in chart.caption
    assert C.trend_chart({}) is None


def test_run_suite_keeps_a_dated_copy(tmp_path, monkeypatch):
    from newsmotion_engine.bench import suites

    monkeypatch.setitem(suites.SUITES, "fake", lambda log: {"fps": 1.0})
    suites.run_suite("fake", tmp_path / "fake.json", history_dir=tmp_path / "history")
    (kept,) = (tmp_path / "history" / "fake").glob("*.json")
    assert json.loads(kept.read_text()) == json.loads((tmp_path / "fake.json").read_text()) == {"fps": 1.0}
    assert C._stamp(kept.stem) is not None
