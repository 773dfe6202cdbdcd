"""The scorecard's bench rows: one per result record, its headline figures as columns."""

from newsmotion_engine.bench.record import BenchResult, write_result
from newsmotion_engine.bench.scorecard import build_scorecard


def test_bench_rows_are_records_with_their_headline(storage, tmp_path):
    folder = tmp_path / "results"
    write_result(folder / "warp.json", BenchResult(
        name="warp", title="warp fps", created_at="2026-12-01T00:00:00+00:00", device="cpu (2 cores)", commit=None,
        command="newsmotion bench warp", headline={"fps, median run": 70.0}, data={"fps_runs": [1, 2]},
    ))  # fmt: skip
    (folder / "old.json").write_text('{"fps": 3}')
    skipped: list[str] = []
    frame = build_scorecard(storage, [folder], on_skip=skipped.append)
    (row,) = frame[frame["kind"] == "bench"].to_dict("records")
    assert row["bench"] == "warp" and row["device"] == "cpu (2 cores)" and row["fps, median run"] == 70.0
    assert "fps_runs" not in frame.columns  # the data stays in the record
    assert len(skipped) == 1 and "old.json" in skipped[0] and "not a benchmark result" in skipped[0]
