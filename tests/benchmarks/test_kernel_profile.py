"""benchmarks/kernel_profile.py: kernel names by category, the GPU's busy time as a union of
intervals, a CPU profile's summary; and the zoo benches' ``--profile-steps``: one more clip under the
profiler after the timed one, as the row's ``profile`` (tiny presets on the CPU, random weights)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from benchmarks import kernel_profile as kp


def _kernel(name: str, start: float, end: float) -> SimpleNamespace:
    return SimpleNamespace(name=name, time_range=SimpleNamespace(start=start, end=end, elapsed_us=lambda: end - start))


@pytest.mark.parametrize(("name", "cat"), [
    ("void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128>>", "attention"),
    ("_attn_fwd", "attention"),
    ("sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc", "conv"),
    ("aten::convolution", "conv"),
    ("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NNT", "gemm"),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", "gemm"),
    ("aten::addmm", "gemm"),
    ("triton_per_fused_native_layer_norm_0", "norm"),
    ("triton_poi_fused_add_mul_silu_3", "elementwise-triton"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor>", "elementwise-triton"),
    ("triton_poi_fused_convert_element_type_2", "elementwise-triton"),  # a cast, not a convolution
    ("Memcpy DtoH (Device -> Pinned)", "copy"),
    ("aten::copy_", "copy"),
    ("void at::native::reduce_kernel<512, 1>", "other"),
])  # fmt: skip
def test_kernel_names_fall_in_the_documented_categories(name, cat):
    assert kp.category(name) == cat


def test_busy_time_is_the_union_of_compute_kernels_and_copies_are_apart():
    kernels = [_kernel("gemm_a", 0, 1000), _kernel("gemm_b", 500, 1500),  # overlap on two streams: 1.5 ms busy
               _kernel("triton_poi_fused_add", 3000, 3500), _kernel("Memcpy HtoD", 1500, 3000)]  # fmt: skip
    busy, copy = kp.gpu_busy_and_copy_ms(kernels)
    assert busy == pytest.approx(2.0) and copy == pytest.approx(1.5)
    assert kp.kernel_totals(kernels)[0] == ("Memcpy HtoD", (1.5, 1))  # the largest total first


def test_profile_call_on_the_cpu_sums_operators_by_category():
    torch = pytest.importorskip("torch")

    a = torch.randn(64, 64)
    value, summary = kp.profile_call(lambda: torch.nn.functional.layer_norm(a @ a, (64,)).sum(), top=5)
    assert isinstance(value, torch.Tensor)
    json.dumps(summary)  # JSON-able
    assert summary["cuda"] is False and summary["gpu_busy_ms"] is None and summary["copy_ms"] is None
    assert summary["profiled_wall_ms"] > 0 and "no CUDA" in summary["source"]
    assert set(summary["by_category"]) == set(kp.CATEGORIES)
    assert summary["by_category"]["gemm"]["count"] >= 1 and summary["by_category"]["norm"]["count"] >= 1
    assert 0 < len(summary["top"]) <= 5
    assert set(summary["top"][0]) == {"name", "ms", "count", "category"}


def test_step_difference_leaves_one_steps_kernels():
    """Two summaries of a clip at 1 and 3 steps: per category and per kernel, what one step adds;
    a kernel missing from the shorter profile's top counts whole and says so."""

    def summary(gemm_ms: float, decode_ms: float, busy: float, extra: list[dict]) -> dict:
        cats = {c: {"ms": 0.0, "count": 0} for c in kp.CATEGORIES}
        cats["gemm"] = {"ms": gemm_ms, "count": int(gemm_ms)}
        cats["conv"] = {"ms": decode_ms, "count": 10}
        top = [{"name": "gemm_kernel", "ms": gemm_ms, "count": int(gemm_ms), "category": "gemm"},
               {"name": "decode_conv", "ms": decode_ms, "count": 10, "category": "conv"}, *extra]
        return {"source": "CUDA kernels", "gpu_busy_ms": busy, "total_ms": gemm_ms + decode_ms, "by_category": cats, "top": top}

    fewer = summary(100.0, 500.0, 590.0, [])
    more = summary(300.0, 500.0, 800.0, [{"name": "late_kernel", "ms": 4.0, "count": 2, "category": "other"}])
    one = kp.step_difference(fewer, more, steps=2)
    assert one["by_category"]["gemm"] == {"ms": 100.0, "count": 100}
    assert one["by_category"]["conv"] == {"ms": 0.0, "count": 0}  # the once-a-clip decode drops out
    assert one["gpu_busy_ms"] == 105.0 and one["total_ms"] == 100.0
    assert [r["name"] for r in one["top"]] == ["gemm_kernel", "late_kernel", "decode_conv"]
    assert one["top"][1] == {"name": "late_kernel", "category": "other", "ms": 2.0, "count": 1, "whole": True}
    assert "whole" not in one["top"][0]
    cpu = dict(fewer, gpu_busy_ms=None)
    assert kp.step_difference(cpu, more)["gpu_busy_ms"] is None


def _check_profile(row: dict, steps: int) -> None:
    prof = row["profile"]
    assert "error" not in prof, prof
    assert prof["options"] == {"steps": steps} and prof["frames_out"] == row["frames_out"]
    assert prof["cuda"] is False and set(prof["by_category"]) == set(kp.CATEGORIES) and prof["top"]
    assert prof["by_category"]["gemm"]["ms"] > 0
    one = prof["one_step"]  # a second profile at steps + 1, less the first
    assert "error" not in one, one
    assert one["steps"] == 1 and set(one["by_category"]) == set(kp.CATEGORIES) and one["top"]
    assert one["by_category"]["gemm"]["count"] > 0  # one more step calls the denoiser again
    json.dumps(prof)


def test_scail2_profile_steps_adds_only_the_profile_to_the_timed_row(tmp_path):
    """timed_variant: the row of a profiled run has the keys of a plain one plus ``profile``; the
    profiled clip (1 step) does not overwrite the timed clip's figures (2 steps)."""
    pytest.importorskip("diffusers")
    from benchmarks import scail2

    kw = dict(sizes=[(64, 128)], frames=9, steps=2, variants=["batch_cfg"], device="cpu", log=lambda m: None)
    plain = scail2.bench_scail2("tiny", **kw)["rows"]["64x128"]["batch_cfg"]
    profiled = scail2.bench_scail2("tiny", profile_steps=1, **kw)["rows"]["64x128"]["batch_cfg"]
    assert "error" not in plain and "profile" not in plain
    assert set(profiled) - set(plain) == {"profile"} and set(plain) <= set(profiled)
    assert profiled["cond_passes"] == plain["cond_passes"] == 2  # the timed clip's 2 steps, not the profile's 1
    _check_profile(profiled, 1)


def test_mimicmotion_profile_steps_flag(tmp_path):
    pytest.importorskip("diffusers")
    from benchmarks import mimicmotion
    from benchmarks.lab_record import read_lab_data

    out = tmp_path / "mm.json"
    mimicmotion.main(["--preset", "tiny", "--sizes", "80x128", "--frames", "9", "--steps", "2", "--variants", "batch_cfg",
                      "--profile-steps", "1", "--json", str(out)])  # fmt: skip
    row = read_lab_data(out)["rows"]["80x128"]["batch_cfg"]
    assert "error" not in row, row
    _check_profile(row, 1)


def test_echomimic_profile_steps_adds_a_profile_per_variant():
    pytest.importorskip("diffusers")
    from benchmarks import echomimic_v3

    result = echomimic_v3.bench_echomimic("tiny", sizes=[(64, 128)], seconds=0.2, steps=1, variants=["stock"], device="cpu",
                                          profile_steps=1, log=lambda m: None)  # fmt: skip
    _check_profile(result["rows"]["64x128"]["stock"], 1)


def test_champ_profile_steps_adds_a_profile_per_variant(tmp_path, monkeypatch):
    pytest.importorskip("diffusers")
    from benchmarks import champ
    from newsmotion_engine.render.backends.champ.backend import ChampBackend
    from newsmotion_engine.render.backends.champ.fit import FitConfig
    from newsmotion_engine.render.backends.champ.synthetic_body import write_synthetic_smpl

    monkeypatch.setattr(ChampBackend, "fit_config", FitConfig(iterations=10))
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as test_champ_bench: the tiny models' ops are small
    try:
        result = champ.bench_champ(write_synthetic_smpl(tmp_path / "SMPL_SYNTH.npz"), "tiny", sizes=[(64, 128)], frames=9, steps=1,
                                   variants=["conditional"], device="cpu", dtype="float32", model_width=64, profile_steps=1,
                                   log=lambda m: None)  # fmt: skip
    finally:
        torch.set_num_threads(threads)
    row = result["rows"]["64x128"]["conditional"]
    assert "error" not in row, row
    _check_profile(row, 1)
