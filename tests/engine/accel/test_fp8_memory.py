"""FP8 linears (CPU: clear error or labelled storage fallback; reversible only when the original
weights are kept), FP8 attention availability, chunked feed-forward and VAE tiling equivalence."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("diffusers")

from newsmotion_engine.accel.attention import Attention, AttentionUnavailableError, set_attention  # noqa: E402
from newsmotion_engine.accel.fp8 import (  # noqa: E402
    Float8Linear,
    Fp8Linears,
    Fp8UnsupportedError,
    fp8_compute_supported,
    quantize_fp8,
    restore_fp8,
)
from newsmotion_engine.accel.memory import FfnChunks, VaeTiling, chunk_feed_forward, unchunk_feed_forward  # noqa: E402
from newsmotion_engine.accel.registry import AccelConfigError  # noqa: E402
from newsmotion_engine.bench.gpu import forward_inputs  # noqa: E402
from newsmotion_engine.render.backends.wan_animate.components import build_transformer  # noqa: E402
from newsmotion_engine.render.backends.wan_animate.config import WanAnimateOptions  # noqa: E402

OPTS = WanAnimateOptions(preset="tiny", device="cpu", dtype="float32")
CPU = torch.device("cpu")


def _model_inputs():
    model = build_transformer(OPTS, CPU, torch.float32)
    return model, forward_inputs(OPTS.preset_spec.transformer, 32, 32, 5, CPU, torch.float32)


def _snr_db(x, ref):
    return float(10 * torch.log10(ref.pow(2).mean() / (x - ref).pow(2).mean()))


@pytest.mark.skipif(fp8_compute_supported()[0], reason="this machine has FP8 tensor cores")
def test_fp8_without_hardware_errors_or_falls_back_labelled():
    model, inputs = _model_inputs()
    with torch.no_grad():
        ref = model(**inputs)[0]
    with pytest.raises(Fp8UnsupportedError, match="fp8='auto'"):
        quantize_fp8(model, Fp8Linears(mode="compute"))
    report = quantize_fp8(model, Fp8Linears(mode="auto")).report
    assert report["mode"] == "storage" and "fallback" in report and "FP8 storage" in report["fallback"]
    assert report["layers"] > 0
    assert any(isinstance(m, Float8Linear) for m in model.modules())
    with torch.no_grad():
        out = model(**inputs)[0]
    assert _snr_db(out, ref) > 20  # e4m3 weights: a few % error, never garbage


def test_fp8_swap_is_undone_exactly_when_the_originals_are_kept():
    model, inputs = _model_inputs()
    with torch.no_grad():
        ref = model(**inputs)[0]
    before = {n: p.clone() for n, p in model.named_parameters()}
    swap = quantize_fp8(model, Fp8Linears(mode="storage", keep_original=True))
    assert swap.report["layers"] > 0 and any(isinstance(m, Float8Linear) for m in model.modules())
    restore_fp8(swap)
    assert not any(isinstance(m, Float8Linear) for m in model.modules())
    after = dict(model.named_parameters())
    assert before.keys() == after.keys() and all(torch.equal(before[n], after[n]) for n in before)
    with torch.no_grad():
        assert torch.equal(model(**inputs)[0], ref)
    lossy = quantize_fp8(model, Fp8Linears(mode="storage"))
    with pytest.raises(RuntimeError, match="cannot be undone"):
        restore_fp8(lossy)


def test_config_validation():
    with pytest.raises(AccelConfigError, match="fp8 mode 'off'"):
        Fp8Linears(mode="off")
    with pytest.raises(AccelConfigError, match="FFN chunks 0"):
        FfnChunks(chunks=0)
    with pytest.raises(AccelConfigError, match="stride"):
        VaeTiling(tile=128, stride=192)
    with pytest.raises(AccelConfigError, match="use one of"):
        Attention("magic")
    with pytest.raises(AccelConfigError, match="fp8-triton' only"):
        Attention("cudnn", variant="fp8")
    assert Attention("fp8-triton").variant == "int8qk-fp8pv"  # the default is named in reports


def test_fp8_weight_storage_halves_bytes():
    lin = torch.nn.Linear(64, 32).to(torch.bfloat16)
    q = Float8Linear(lin, compute=False, out_dtype=torch.bfloat16)
    assert q.weight_fp8.element_size() == 1 and q.weight_fp8.shape == (32, 64)
    x = torch.randn(4, 64, dtype=torch.bfloat16)
    with torch.no_grad():
        assert _snr_db(q(x).float(), lin(x).float()) > 20


def test_fp8_attention_needs_a_hopper_gpu():
    if torch.cuda.is_available():
        pytest.skip("CUDA present: the kernel's accuracy is measured by the GPU bench")
    model, _ = _model_inputs()
    with pytest.raises(AttentionUnavailableError, match="attention='sdpa'"):
        set_attention(model, Attention("fp8-triton"))


def test_chunked_feed_forward_matches():
    model, inputs = _model_inputs()
    with torch.no_grad():
        ref = model(**inputs)[0]
        assert chunk_feed_forward(model, FfnChunks(chunks=3)) == len(model.blocks)
        out = model(**inputs)[0]
        unchunk_feed_forward(model)
        back = model(**inputs)[0]
    assert torch.allclose(out, ref, atol=1e-5, rtol=1e-4)
    assert torch.equal(back, ref)
