import json
import os
from pathlib import Path

import pytest

from newsmotion_engine import cachedir
from newsmotion_engine.bench import record
from newsmotion_engine.bench.record import BenchResult, NotABenchResult, read_result, read_results, write_result


def _result(name: str = "warp", **kw) -> BenchResult:
    base = dict(
        name=name, title="warp render, 512x512, 120 frames", created_at="2026-12-01T00:00:00+00:00",
        device="cpu (2 cores)", commit=None, command="newsmotion bench warp --json benchmarks/results/warp.json",
        headline={"fps": 41.5, "p99 frame (ms)": 30.1, "backend": "warp"}, data={"runs": [1, 2, {"a": None}]},
    )
    return BenchResult(**{**base, **kw})


def test_round_trip(tmp_path: Path) -> None:
    result = _result(weights="random weights", commit="a" * 40)
    path = write_result(tmp_path / "warp.json", result)
    assert read_result(path) == result
    raw = json.loads(path.read_text())
    assert raw["schema"] == "newsmotion.bench_result" and raw["version"] == 1
    assert list(raw["headline"]) == ["fps", "p99 frame (ms)", "backend"]  # display order kept


def test_weights_defaults_to_none_when_absent(tmp_path: Path) -> None:
    path = write_result(tmp_path / "warp.json", _result())
    raw = json.loads(path.read_text())
    del raw["weights"]
    path.write_text(json.dumps(raw))
    assert read_result(path).weights is None


def test_write_is_atomic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_result(tmp_path / "warp.json", _result())
    before = path.read_text()

    def fail(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(cachedir.os, "replace", fail)
    with pytest.raises(OSError, match="disk full"):
        write_result(path, _result(title="another"))
    assert path.read_text() == before  # the old record is untouched
    assert sorted(p.name for p in tmp_path.iterdir()) == ["warp.json"]  # no temporary left behind


def test_written_file_is_readable_by_others(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        path = write_result(tmp_path / "sub" / "warp.json", _result())
    finally:
        os.umask(old)
    assert path.stat().st_mode & 0o777 == 0o644


@pytest.mark.parametrize(
    "content",
    ['{"fps": 3}', "not json", "[1, 2]", '{"schema": "newsmotion.bench_result", "version": 99}',
     '{"schema": "newsmotion.bench_result", "version": 1, "name": "x"}'],
)
def test_non_result_file_names_the_file(tmp_path: Path, content: str) -> None:
    path = tmp_path / "old_shape.json"
    path.write_text(content)
    with pytest.raises(NotABenchResult, match="old_shape.json"):
        read_result(path)


def test_read_results_sorted_by_name(tmp_path: Path) -> None:
    for name in ["matte", "chroma", "warp"]:
        write_result(tmp_path / f"{name}.json", _result(name))
    assert [r.name for r in read_results(tmp_path)] == ["chroma", "matte", "warp"]
    assert read_results(tmp_path / "missing") == []


def test_current_commit_is_a_sha_or_none() -> None:
    commit = record.current_commit()
    assert commit is None or (len(commit) == 40 and int(commit, 16) >= 0)


def test_read_results_raises_on_a_non_result_or_reports_it(tmp_path: Path) -> None:
    write_result(tmp_path / "warp.json", _result())
    (tmp_path / "old.json").write_text('{"fps": 3}')
    with pytest.raises(NotABenchResult, match="old.json"):
        read_results(tmp_path)
    skipped: list[str] = []
    assert [r.name for r in read_results(tmp_path, on_skip=skipped.append)] == ["warp"]
    assert len(skipped) == 1 and "old.json" in skipped[0]


def test_figure_text() -> None:
    assert [record.figure_text(v) for v in (71.64321, 18574, "0 / 21")] == ["71.64", "18574", "0 / 21"]
