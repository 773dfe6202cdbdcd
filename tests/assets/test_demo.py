"""The demo's benchmark table: the benchmarks a newsroom reads first, with their records' headline
figures."""

from dataclasses import replace

from newsmotion_assets.demo import DEMO_BENCHMARKS, benchmark_table
from newsmotion_engine.bench.record import RESULTS_DIR, BenchResult, figure_text, read_results


def _rows(table) -> dict[str, tuple[str, str]]:
    names, devices, figures = (list(column.cells) for column in table.columns)
    return {name: (device, figure) for name, device, figure in zip(names, devices, figures)}


def test_the_table_shows_every_demo_benchmark_from_the_committed_records():
    assert len(DEMO_BENCHMARKS) <= 10
    results = read_results(RESULTS_DIR)
    rows = _rows(benchmark_table(results))
    assert list(rows) == list(DEMO_BENCHMARKS)  # each one committed, in the demo's order
    by_name = {r.name: r for r in results}
    warp = by_name["warp"]
    assert rows["warp"] == (warp.device, "; ".join(f"{k} {figure_text(v)}" for k, v in warp.headline.items()))
    assert "speed-up vs stock (x) 6.18" in rows["wan_animate_clip_h100"][1]


def test_other_results_are_left_out_and_missing_ones_skipped():
    other = BenchResult(name="other", title="t", created_at="2026-01-01T00:00:00+00:00", device="cpu (2 cores)", commit=None,
                        command="c", headline={"x": 1}, data={})  # fmt: skip
    warp = replace(other, name="warp", headline={"fps": 61.0, "runs": 5, "note": "quiet"})
    assert _rows(benchmark_table([other, warp])) == {"warp": ("cpu (2 cores)", "fps 61; runs 5; note quiet")}
