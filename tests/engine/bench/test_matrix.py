from newsmotion_engine.bench.matrix import ENTRIES, matrix_markdown, read_matrix
from newsmotion_engine.bench.record import BenchResult


def _record(name, headline=None, data=None, device="NVIDIA H100 80GB HBM3"):
    return BenchResult(name=name, title=name, created_at="2026-12-06T00:00:00+00:00", device=device, commit=None,
                       command=f"measure {name}", headline=headline or {}, data=data or {}, weights="random weights")


def test_rows_from_both_record_shapes_and_the_unmeasured():
    wan = _record("wan_animate_clip_h100", {"ours, 1:3 keyframes (s)": 20.0, "stock (s)": 140.0,
                                            "peak, ours (GiB)": 30.0, "peak, stock (GiB)": 50.0})
    zoo = _record("mimicmotion_h100", data={"shape": {"steps": 25, "frames": 120}, "fastest_720x1280": "batch_cfg",
                                             "rows": {"720x1280": {"stock": {"end_to_end_s": 90.0, "peak_vram_gib": 20.0},
                                                                    "batch_cfg": {"end_to_end_s": 60.0, "peak_vram_gib": 95.0}}}})
    unrelated = _record("echomimic_v3_parity")  # not stock-vs-ours records
    maps = _record("champ_maps_cpu", data={"rows": {"workers_1": {"maps": {"end_to_end_s": 3.0}}}})
    earlier = _record("champ_compile_h100", data={"rows": {"720x1280": {"stock": {"end_to_end_s": 90.0}, "ours": {"end_to_end_s": 80.0}}}})
    rows = {r.backend: r for r in read_matrix([wan, zoo, unrelated, maps, earlier])}
    assert set(rows) == {e.backend for e in ENTRIES} and rows["champ"].record is None
    assert rows["wan-animate"].speedup == 7.0 and rows["wan-animate"].meets_goal is True
    m = rows["mimicmotion"]
    assert (m.stock_s, m.ours_s, m.ours_variant, m.steps, m.speedup) == (90.0, 60.0, "batch_cfg", 25, 1.5)
    assert m.meets_goal is False  # 1.5x, and 95 GiB does not fit an 80 GB card
    assert rows["echomimic-v3"].record is None and rows["echomimic-v3"].command.startswith("python -m benchmarks.echomimic_v3")
    text = matrix_markdown(list(rows.values()))
    assert "| mimicmotion | NVIDIA H100 80GB HBM3 |" in text and "run: `python -m benchmarks.scail2" in text


def test_an_ours_only_record_says_stock_did_not_run():
    (row,) = [r for r in read_matrix([_record("wan_animate_2_clip_h100", {"clip (s)": 208.0, "peak (GiB)": 35.2})])
              if r.backend == "wan-animate-2"]
    assert row.ours_s == 208.0 and row.stock_s is None and row.speedup is None and row.meets_goal is None
    assert "stock did not run" in row.note


def test_the_scorecard_carries_the_measured_matrix_rows(storage, tmp_path):
    from newsmotion_engine.bench.record import write_result
    from newsmotion_engine.bench.scorecard import build_scorecard

    write_result(tmp_path / "wan_animate_clip_h100.json", _record("wan_animate_clip_h100", {"ours (s)": 20.0, "stock (s)": 140.0}))
    frame = build_scorecard(storage, [tmp_path])
    matrix = frame[frame["kind"] == "matrix"]
    assert list(matrix["backend"]) == ["wan-animate"] and list(matrix["speedup"]) == [7.0]  # unmeasured backends: no row


def test_a_wan_animate_2_record_gives_its_schedules_steps():
    """The wan-animate-2 clip records name a schedule in ours' options (as strings), not a step count."""
    joined = _record("wan_animate_2_clip_h200", {"ours (s)": 200.0, "stock (s)": 390.0},
                     data={"clip": {"ours": {"options": {"schedule": "distilled", "steps": "None"}}}}, device="NVIDIA H200")
    ours_only = _record("wan_animate_2_clip_h100", {"clip (s)": 208.0}, data={"ours": {"options": {"schedule": "base", "steps": "None"}}})
    given = _record("wan_animate_2_clip_h100", {"clip (s)": 208.0}, data={"ours": {"options": {"schedule": "base", "steps": "8"}}})
    steps = lambda rec: [r for r in read_matrix([rec]) if r.backend == "wan-animate-2"][0].steps  # noqa: E731
    assert (steps(joined), steps(ours_only), steps(given)) == (10, 40, 8)
