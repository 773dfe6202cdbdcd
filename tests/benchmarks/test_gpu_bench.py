"""The GPU bench harness runs on CPU with the tiny preset (structure only; timings on CPU are
not results), and its "ours" side is the shipped code path: the backend's own loading and cache
builders, the acceleration registry, and the segment renderer ``frames()`` uses."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("diffusers")

from newsmotion_engine.accel import registry  # noqa: E402
from newsmotion_engine.accel.cfg import CFGSchedule  # noqa: E402
from newsmotion_engine.accel.fp8 import Fp8Linears  # noqa: E402
from newsmotion_engine.accel.teacache import TeaCache  # noqa: E402
from newsmotion_engine.render.backends.wan_animate import segment  # noqa: E402
from newsmotion_engine.render.backends.wan_animate.backend import WanAnimateBackend  # noqa: E402

from benchmarks import gpu  # noqa: E402
from benchmarks.lab_record import read_lab_data  # noqa: E402

SMALL = dict(width=64, height=64, frames=5, steps=2, reps=1, device="cpu", log=lambda s: None)


def _spy(monkeypatch, module, name, calls):
    real = getattr(module, name)

    def spy(*args, **kwargs):
        calls.append((name, args, kwargs))
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, spy)


def test_bench_gpu_tiny_cpu_writes_labelled_json_through_the_shipped_path(tmp_path, monkeypatch):
    calls: list = []
    _spy(monkeypatch, segment, "render_segment", calls)
    _spy(monkeypatch, registry, "apply_accelerations", calls)
    _spy(monkeypatch, registry, "remove_accelerations", calls)
    for name in ("prepare_guidance", "prepare_persona", "load_guidance", "load_persona"):
        _spy(monkeypatch, WanAnimateBackend, name, calls)
    out = tmp_path / "gpu_tiny.json"
    res = gpu.bench_gpu("tiny", part="all", json_path=out, render_variants=["all", "kernels_only"], **SMALL)
    data = read_lab_data(out)
    assert data["weights"] == "random weights" and "numerical drift" in data["note"]
    v = data["forward"]["variants"]
    assert v["stock_bf16"]["forward_ms"] > 0 and v["stock_bf16"]["finite"]
    assert v["fp8_linears"]["setup"]["fp8"]["mode"] == "storage"  # labelled fallback on CPU
    assert v["fp8_linears"]["forward_ms"] > 0 and v["fp8_linears"]["rel_err_vs_stock"] < 0.1  # runs after a removed variant
    assert v["compile_blocks"] == {"skipped": "compile timing needs CUDA"}
    assert "forward_speedup_vs_stock" in data and data["render"]["render_speedup_vs_stock"] > 0
    render = data["render"]
    assert render["ours"]["psnr_vs_stock"] > 30  # same inputs and noise as the stock pipeline
    assert res["render"]["stock"]["end_to_end_s"] > 0
    assert render["variants"]["all"]["settings"]["teacache"]["threshold"] == 0.15
    assert render["variants"]["all"]["cfg"]["plain_cfg_passes"] == 2  # guidance 1: one pass per step
    assert render["variants"]["kernels_only"]["teacache"] is None

    names = [c[0] for c in calls]
    # The render part: the backend's cache builders and loaders, then the shipped segment renderer
    # once per variant, each variant's configs applied before and removed after through the registry.
    assert {"prepare_guidance", "prepare_persona", "load_guidance", "load_persona"} <= set(names)
    rendered = [c for c in calls if c[0] == "render_segment"]
    assert len(rendered) == 2 and all(c[2]["steps"] == 2 and c[2]["segment"] == 0 for c in rendered)
    applied = [c[1][1] for c in calls if c[0] == "apply_accelerations"]
    assert (TeaCache(threshold=0.15), CFGSchedule(start=0.0, stop=0.8, every=2, momentum=0.5)) in [tuple(a) for a in applied]
    first_render = names.index("render_segment")
    assert names[first_render - 1] == "apply_accelerations" and names[first_render + 1] == "remove_accelerations"
    # The forward part: every variant that ran with configs was applied and removed again (FP8 kept
    # its bf16 weights on the host for that).
    fwd_applied = [tuple(c[1][1]) for c in calls[: names.index("prepare_guidance")] if c[0] == "apply_accelerations" and c[1][1]]
    assert (Fp8Linears(mode="auto", keep_original=True),) in fwd_applied
    assert names[: names.index("prepare_guidance")].count("remove_accelerations") == len(fwd_applied)


def test_bench_accepts_flat_option_mappings_and_rejects_bad_ones():
    with pytest.raises(ValueError, match="render variants"):
        gpu.bench_gpu("tiny", part="render", render_variants=["nope"], **SMALL)
    with pytest.raises(Exception, match="unknown wan-animate acceleration option.*teacachez"):
        gpu.bench_gpu("tiny", part="render", render_variants={"x": {"teacachez": 1}}, **SMALL)
    res = gpu.bench_gpu("tiny", part="render", render_accel={"ffn_chunks": 2, "attention": "best"},
                        render_variants={"momentum": {"cfg_every": 2, "cfg_momentum": 0.5}}, guidance_scale=2.0, **SMALL)  # fmt: skip
    row = res["render"]["variants"]["momentum"]
    assert row["settings"]["cfg"] == {"start": 0.0, "stop": 1.0, "every": 2, "momentum": 0.5}
    assert row["settings"]["ffn_chunks"] == {"chunks": 2} and "attention" not in row["settings"]  # "best" on CPU: stock SDPA
    assert row["cfg"]["uncond_passes"] == 1 and row["cfg"]["cond_passes"] == 2


def test_backend_smoke_runs_a_clip_through_the_shipped_entry_points():
    options = {"dtype": "float32", "fp8": "auto", "teacache": 0.5, "guidance_scale": 3.0, "cfg_every": 2,
               "vae_tiling": True, "ffn_chunks": 2}  # fmt: skip
    res = gpu.backend_smoke("tiny", device="cpu", width=64, height=64, frames=13, steps=2, options=options, log=lambda s: None)
    assert res["frames"] == 13
    info = res["backend"]
    assert info["last_render"]["segments"] == 2 and set(info["accelerations"]) == {"fp8", "ffn_chunks", "teacache", "cfg", "vae_tiling"}


def test_sweep_takes_shapes_and_variants_and_writes_one_record(tmp_path, monkeypatch):
    """``python -m benchmarks.gpu sweep --shape ... --variants ...``: each shape swept with the
    variants asked for, in one record (one shape keeps the record's earlier top-level layout); a
    shape that is not TOKENS,HEADS,DIM is a usage error. The sweep itself needs CUDA: stubbed."""
    calls = []

    def fake_sweep(tokens, heads, dim, variants=None):
        calls.append((tokens, heads, dim, variants))
        return {"shape": [1, tokens, heads, dim], "cudnn_ms": float(tokens), "configs": {}}

    monkeypatch.setattr(gpu, "attention_config_sweep", fake_sweep)
    out = tmp_path / "sweep.json"
    gpu.main(["sweep", "--shape", "75600,40,128", "--shape", "14592,192,64", "--variants", "int8qk-fp8pv,int8qk-fp8pv-polyexp",
              "--json", str(out)])  # fmt: skip
    assert calls == [(75600, 40, 128, ("int8qk-fp8pv", "int8qk-fp8pv-polyexp")), (14592, 192, 64, ("int8qk-fp8pv", "int8qk-fp8pv-polyexp"))]
    data = read_lab_data(out)
    assert set(data["shapes"]) == {"75600x40x128", "14592x192x64"}
    gpu.main(["sweep", "--json", str(out)])
    assert calls[-1] == (75600, 40, 128, None) and read_lab_data(out)["cudnn_ms"] == 75600.0
    with pytest.raises(SystemExit):
        gpu.main(["sweep", "--shape", "75600,40", "--json", str(out)])
    with pytest.raises(SystemExit):  # a variant the kernel does not have: a usage error before any sweep
        gpu.main(["sweep", "--variants", "int8qk-fp8pv,no-such", "--json", str(out)])
    assert len(calls) == 3
