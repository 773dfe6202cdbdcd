"""The green-screen bench on one sample persona, small: the raw generated-like frame does not key,
the composite does."""

from newsmotion_engine.bench.chroma import bench_chroma


def test_chroma_bench_before_and_after(storage):
    result = bench_chroma(storage, portraits=["astronaut"], size=(144, 256), frames=(0,))
    row = result["portraits"]["astronaut"]["0"]
    assert row["before"]["exact_background"] < 0.01 and row["after"]["exact_background"] > 0.97  # the edge band is a larger share at this size
    assert row["after"]["iou"] > 0.95 > row["before"]["iou"]
    assert row["after"]["person_error"] < 4.0
