"""The per-block compile bench (``bench/animate2_kernels.py``) as a CPU dry run: the same code,
eager, on the tiny preset."""

from __future__ import annotations


import pytest

pytest.importorskip("diffusers")

from benchmarks import animate2_kernels as K  # noqa: E402
from benchmarks.lab_record import read_lab_data  # noqa: E402


def test_dry_run_writes_each_variant_and_refuses_unknown_ones(tmp_path):
    out = tmp_path / "kernels.json"
    res = K.bench_kernels("tiny", layers=1, width=64, height=64, variants=("default", "gelu_sigmoid"), reps=1,
                          json_path=out, log=lambda _: None)  # fmt: skip
    saved = read_lab_data(out)
    assert saved["part"] == "kernels" and saved["weights"] == "random weights" and saved["layers"] == 1
    for name in ("default", "gelu_sigmoid"):
        row = saved["variants"][name]
        assert row["forward"]["ms"] > 0 and row["forward_ms_per_block"] == round(row["forward"]["ms"], 2)
    assert saved["variants"]["default"]["rel_diff_vs_first_variant"] == 0.0
    assert res["variants"].keys() == saved["variants"].keys()
    assert K.main(["--preset", "tiny", "--variants", "default,fastest"]) == 2
    assert K.main(["--preset", "nope"]) == 2  # one error line, not a KeyError


def test_prep_variant_sets_the_processors_and_gpu_only_parts_refuse_the_cpu(tmp_path, capsys):
    """``prep_torch`` is recorded per variant (on the CPU the stock processor runs either way); the
    prep and decode benches need CUDA and say so in one line with exit 2."""
    import torch

    res = K.bench_kernels("tiny", layers=1, width=64, height=64, variants=("default", "prep_torch"), reps=1,
                          log=lambda _: None)  # fmt: skip
    assert res["variants"]["default"]["prep"] == "fused" and res["variants"]["prep_torch"]["prep"] == "torch"
    assert res["variants"]["prep_torch"]["compile"] == {}  # "prep" is not a Compile option
    if not torch.cuda.is_available():
        for flag in (["--prep-only"], ["--decode-only"], ["--soak", "5"]):
            assert K.main(flag) == 2
            assert "needs a CUDA GPU" in capsys.readouterr().err
