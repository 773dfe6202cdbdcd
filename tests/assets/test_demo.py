"""The demo's benchmark table: every committed result shows its key figures, read from its JSON."""

import json
from pathlib import Path

from newsmotion_assets.demo import benchmark_table, key_figures

RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results"


def _rows(table) -> dict[str, str]:
    names, figures = (list(column.cells) for column in table.columns)
    return dict(zip(names, figures))


def test_every_committed_result_has_key_figures():
    paths = sorted(RESULTS.glob("*.json"))
    assert len(paths) >= 17
    rows = _rows(benchmark_table(paths))
    assert set(rows) == {p.name for p in paths}
    assert all(rows.values())
    # The five that used to show an empty cell:
    assert rows["gpu_attention_sweep_lazy_14b_h200.json"].startswith(
        "best int8qk-fp8pv 64x128 w4 s3 149.1 ms vs cuDNN 203.2 ms (1.36x, error 0.040)"
    )
    assert "vs cuDNN 205.7 ms" in rows["gpu_attention_sweep_pipelined_14b_h200.json"]
    assert "vs cuDNN 208.2 ms" in rows["gpu_attention_sweep_tma_14b_h200.json"]
    assert rows["attention_sass.json"] == (
        "int8qk-fp8pv (default): 8.80-10.47 main-loop instructions per score over 4 configs, 0 B spilled"
    )
    assert rows["gpu_forward_cudagraphs_14b_h200.json"] == "per forward: all 10.65 s, all_cudagraphs 10.65 s"
    faults = json.loads((RESULTS / "faults.json").read_text())
    assert rows["faults.json"].startswith(
        f"fault test: {faults['renders_completed']}/{faults['expected_renders']} renders after a killed worker"
    )
    assert rows["gpu_animate2_attention_14b_h200.json"] == (
        "cached-pass attention split on the 8-bit kernel 1.39x the stock flex mask; error 0.040"
    )
    assert rows["gpu_animate2_clip_stock_14b_h200.json"] == "stock distilled pipeline 379.8 s"
    assert rows["gpu_animate2_forward_14b_h200.json"].startswith("wan-animate-2 extract pass 1.07x stock; cached forward 1.06x stock")
    # The ones that had figures keep them.
    assert rows["warp.json"] == f"{json.loads((RESULTS / 'warp.json').read_text())['fps']:.4g} fps"
    assert "forward 1.48x stock" in rows["gpu_forward_tma_14b_h200.json"]
    smoke = json.loads((RESULTS / "gpu_backend_smoke_registry_h200.json").read_text())
    assert rows["gpu_backend_smoke_registry_h200.json"].startswith(
        f"{smoke['frames']} frames end to end in {smoke['wall_s']:.3g} s (random weights, preset smoke, "
    )


def test_unknown_or_unreadable_results_are_left_out(tmp_path):
    (tmp_path / "odd.json").write_text(json.dumps({"something": {"else": 1}}))
    (tmp_path / "broken.json").write_text("{not json")
    (tmp_path / "list.json").write_text("[1, 2]")
    (tmp_path / "nan.json").write_text('{"fps": NaN}')
    (tmp_path / "good.json").write_text(json.dumps({"fps": 61.0}))
    rows = _rows(benchmark_table(sorted(tmp_path.glob("*.json"))))
    assert rows == {"good.json": "61 fps"}
    assert key_figures({"configs": {}, "cudnn_ms": 200.0}) == []

