"""The bench suites run in a private Storage of a temporary folder and leave the environment alone."""

import os

from newsmotion_engine.bench.suites import private_storage
from newsmotion_engine.storage import Storage


def test_private_storage_is_an_object_not_an_environment_change(storage):
    before = dict(os.environ)
    with private_storage() as store:
        assert isinstance(store, Storage) and store.root.is_dir() and store.root != storage.root
        store.guidance_root.mkdir(parents=True)
        assert dict(os.environ) == before
    assert not store.root.exists() and dict(os.environ) == before


def test_run_suite_writes_a_record_and_keeps_a_dated_copy(tmp_path, monkeypatch):
    from newsmotion_engine.bench import suites
    from newsmotion_engine.bench.record import read_result

    data = {"fps": 61.0, "fps_median": 60.0, "render_only_fps": 90.0, "stages_ms": {"a": 1.0}}
    fake = suites.ProductBench("fps of nothing", "newsmotion bench warp", run=lambda log: dict(data))
    monkeypatch.setitem(suites.BENCHES, "warp", fake)
    monkeypatch.setitem(suites.SUITES, "warp", fake)
    result = suites.run_suite("warp", tmp_path / "warp.json", history_dir=tmp_path / "history")
    (kept,) = (tmp_path / "history" / "warp").glob("*.json")
    assert read_result(kept) == read_result(tmp_path / "warp.json") == result
    assert result.name == "warp" and result.title == "fps of nothing" and result.device.startswith("cpu (")
    assert result.data == data  # the whole output; the warp bench's own headline picks from it
    assert result.headline == {"fps, render + encode (best run)": 61.0, "fps, median run": 60.0, "fps, render alone": 90.0}


def test_every_product_bench_headline_reads_its_committed_record():
    from newsmotion_engine.bench.record import RESULTS_DIR, read_result
    from newsmotion_engine.bench.suites import BENCHES

    for name, bench in BENCHES.items():
        committed = read_result(RESULTS_DIR / f"{name}.json")
        assert bench.headline(name, committed.data) == committed.headline, name
        assert committed.title == bench.title and committed.command == bench.command
