"""The context-parallel bench's speed-ups come from its result records."""

from __future__ import annotations

from benchmarks.context_parallel import speedups
from benchmarks.lab_record import write_lab_result


def test_speedups_from_result_files(tmp_path):
    paths = []
    for world, ms in ((1, 9000.0), (2, 4800.0), (4, 2600.0)):
        paths.append(write_lab_result(tmp_path / f"cp{world}.json", {"world_size": world, "forward_ms": ms, "device": "cpu"},
                                      title="context-parallel forward", headline={"forward (ms)": ms}, command="test"))  # fmt: skip
    res = speedups(paths)
    assert res["cp_speedup_2gpu"] == 1.875 and res["cp_speedup_4gpu"] == 3.462
