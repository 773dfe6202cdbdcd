"""The scorecard charts: which numbers each one draws, and the nightly history it reads."""

from newsmotion_engine.bench.record import RESULTS_DIR, BenchResult, read_results, write_result
from newsmotion_engine.studio import charts as C

from .conftest import make_render


def _record(name: str, data: dict | None = None, headline: dict | None = None, at: str = "2026-12-01T02:00:00+00:00") -> BenchResult:
    return BenchResult(name=name, title=name, created_at=at, device="NVIDIA H200", commit=None, command="-",
                       headline=headline or {}, data=data or {}, weights="random weights")  # fmt: skip


def test_speedups_take_every_variant_and_leave_toy_presets_out(tmp_path):
    write_result(tmp_path / "wan_animate_forward_h200.json", _record("wan_animate_forward_h200", {"preset": "14b", "forward": {"variants": {
        "stock_bf16": {"forward_ms": 12.0}, "all": {"speedup_vs_stock": 1.45}, "fp8": {"speedup_vs_stock": 0.96}}}}))  # fmt: skip
    write_result(tmp_path / "smoke_h200.json", _record("smoke_h200", {"preset": "smoke", "forward": {"variants": {"all": {"speedup_vs_stock": 28.0}}}}))
    write_result(tmp_path / "render_h200.json", _record("render_h200", {"preset": "14b", "render": {"variants": {"all": {"speedup_vs_stock": 2.0}}}}))
    write_result(tmp_path / "clip_h100.json", _record("clip_h100", {"preset": "14b"}, headline={"ours (s)": 22.75, "speed-up vs stock (x)": 6.18}))
    write_result(tmp_path / "runs_h200.json", _record("runs_h200", {"preset": "14b", "runs": {  # joined runs: the first stands for them
        "run1": {"forward": {"variants": {"all": {"speedup_vs_stock": 1.48}}}}, "run2": {"forward": {"variants": {"all": {"speedup_vs_stock": 1.45}}}}}}))  # fmt: skip
    (tmp_path / "notes.json").write_text('{"fps": 1}')  # not a record: reported, left out
    skipped: list[str] = []
    results = read_results(tmp_path, on_skip=skipped.append)
    assert len(skipped) == 1 and "notes.json" in skipped[0]
    assert C.speedup_bars(results) == [("clip_h100 · speed-up vs stock", 6.18), ("render_h200 render · all", 2.0),
                                       ("runs_h200 runs.run1.forward · all", 1.48),
                                       ("wan_animate_forward_h200 forward · all", 1.45),
                                       ("wan_animate_forward_h200 forward · fp8", 0.96)]  # fmt: skip
    chart = C.speedup_chart(results)
    assert chart is not None and chart.svg.startswith("<svg") and chart.png.startswith(b"\x89PNG")
    assert C.speedup_chart([]) is None


def test_stage_chart_from_telemetry(storage):
    records = [make_render(storage, "anna", "nod", "warp"), make_render(storage, "anna", "nod", "wan-animate")]
    chart = C.stage_seconds_chart(records)
    assert chart.name == "stages" and "<svg" in chart.svg
    assert C.stage_seconds_chart([]) is None


def test_history_keeps_runs_and_adds_an_older_latest_record(storage):
    early, late = "2026-11-30T02:00:00+00:00", "2026-12-01T02:00:00+00:00"
    write_result(storage.bench_history_dir / "warp" / "2026-11-30T020000Z.json", _record("warp", headline={"fps": 100.0}, at=early))
    write_result(storage.bench_history_dir / "warp" / "2026-12-01T020000Z.json", _record("warp", headline={"fps": 110.0}, at=late))
    write_result(storage.bench_dir / "warp.json", _record("warp", headline={"fps": 110.0}, at=late))  # the latest run: already kept
    # From before history was kept:
    write_result(storage.bench_dir / "persona.json", _record("persona", headline={"load p50 (ms)": 1.0, "build (s)": 1.3, "note": "x"}, at=early))
    (storage.bench_dir / "old.json").write_text('{"fps": 90.0}')  # an old-format result: left out
    history = C.bench_history(storage)
    assert [r.headline["fps"] for r in history["warp"]] == [100.0, 110.0]
    assert len(history["persona"]) == 1 and set(history) == {"warp", "persona"}
    chart = C.trend_chart(history)
    assert chart is not None and "up to 2 per suite" in chart.caption
    assert C.trend_chart({}) is None


def test_the_committed_records_chart():
    results = read_results(RESULTS_DIR)
    labels = [label for label, _ in C.speedup_bars(results)]
    assert any(label.startswith("wan_animate_render_h200") for label in labels)
    assert not any(label.startswith("smoke_h200") for label in labels)
    assert C.gpu_stage_chart(results) is not None


def test_speedup_bars_show_the_matrix_rows_no_headline_quotes():
    from newsmotion_engine.bench.record import BenchResult
    from newsmotion_engine.studio.charts import speedup_bars

    zoo = BenchResult(name="mimicmotion_h100", title="t", created_at="2026-12-06T00:00:00+00:00", device="H100", commit=None,
                      command="c", headline={}, weights="random weights",
                      data={"fastest_720x1280": "batch_cfg", "rows": {"720x1280": {"stock": {"end_to_end_s": 90.0},
                                                                                   "batch_cfg": {"end_to_end_s": 60.0}}}})
    assert speedup_bars([zoo]) == [("mimicmotion_h100 · mimicmotion stock vs ours (size 720x1280)", 1.5)]


def test_a_zoo_records_approximation_is_a_labelled_bar_beside_its_headline():
    from newsmotion_engine.bench.record import BenchResult
    from newsmotion_engine.studio.charts import APPROXIMATION, speedup_bars

    rows = {"768x768": {"stock": {"end_to_end_s": 90.0}, "fp8": {"end_to_end_s": 60.0},
                        "cudnn": {"end_to_end_s": 45.0, "approximate": True}}}
    zoo = BenchResult(name="echomimic_v3_h100", title="t", created_at="2026-12-06T00:00:00+00:00", device="H100", commit=None,
                      command="c", headline={}, weights="random weights",
                      data={"fastest_768x768": "fp8", "speedup_768x768": 1.5, "fastest_768x768_approximate": "cudnn",
                            "speedup_768x768_approximate": 2.0, "rows": rows})
    assert speedup_bars([zoo]) == [("echomimic_v3_h100 · echomimic-v3 stock vs ours (size 768x768)", 1.5),
                                   ("echomimic_v3_h100 · cudnn (size 768x768)" + APPROXIMATION, 2.0)]


def test_approximations_are_labelled_and_exact_variants_are_not():
    """A variant that says ``approximate`` or carries an ``experimental`` setting (block-sparse
    attention) gets the label suffix and a grey bar; an exact one does not."""
    data = {"preset": "14b", "forward": {"variants": {
        "all": {"speedup_vs_stock": 1.4, "setup": {"fp8": {"mode": "auto"}}},
        "all_sparse50": {"speedup_vs_stock": 2.1, "setup": {"sparse_attention": {"experimental": True}}},
        "teacache": {"speedup_vs_stock": 1.8, "approximate": True},
        "exact": {"speedup_vs_stock": 1.2, "approximate": False}}}}  # fmt: skip
    labels = [label for label, _ in C.speedup_bars([_record("sparse_h200", data)])]
    assert labels == ["sparse_h200 forward · all", "sparse_h200 forward · all_sparse50" + C.APPROXIMATION,
                      "sparse_h200 forward · teacache" + C.APPROXIMATION, "sparse_h200 forward · exact"]  # fmt: skip
