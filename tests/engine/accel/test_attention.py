"""The 8-bit attention kernel's CPU-checkable parts: the quantized-input layout contract (a
strided view read as contiguous gives garbage: relative error ~1), the quantized arithmetic
against SDPA for every variant, the processor against diffusers' stock self-attention, and the
Triton kernel itself under Triton's CPU interpreter where triton is installed."""

from __future__ import annotations

import math
import textwrap

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("diffusers")

from newsmotion_engine.accel import attention as A  # noqa: E402

F = torch.nn.functional


def _sdpa(q, k, v):
    return F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)).transpose(1, 2)


def _rel(a, b):
    return float((a.float() - b.float()).norm() / b.float().norm())


def _qkv(B=2, S=192, H=3, D=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(B, S, H, D, generator=g) for _ in range(3))


@pytest.mark.parametrize("variant", list(A.FP8_VARIANTS))
@pytest.mark.parametrize("S", [192, 100])  # 100: V^T's rows padded to 16 for the TMA descriptors
def test_quantized_inputs_are_contiguous_per_head_and_dequantize_back(variant, S):
    q, k, v = _qkv(S=S)
    B, S, H, D = q.shape
    x = A.quantize_attention_inputs(q, k, v, variant)
    S16 = -(-S // 16) * 16
    shapes = {"q": (B, H, S, D), "k": (B, H, S, D), "vt": (B, H, D, S16), "q_scale": (B, H, S), "v_scale": (B, H, D)}
    for name, shape in shapes.items():
        t = getattr(x, name)
        assert tuple(t.shape) == shape and t.is_contiguous(), name
    # Read the buffers the way the kernel's descriptors do ([B*H, S, D] rows), then dequantize:
    # the logits (K's channel scales live in Q) and V.
    sm = A.LOG2E / math.sqrt(D)
    q8 = x.q.reshape(-1).float().view(B * H, S, D)
    k8 = x.k.reshape(-1).float().view(B * H, S, D)
    logits = (q8 @ k8.transpose(1, 2)) * x.q_scale.reshape(B * H, S, 1) / sm
    qh = q.permute(0, 2, 1, 3).reshape(B * H, S, D)
    kh = (k - k.mean(dim=1, keepdim=True)).permute(0, 2, 1, 3).reshape(B * H, S, D)
    assert _rel(logits, qh @ kh.transpose(1, 2)) < 0.05
    v_back = x.vt.reshape(-1).float().view(B * H, D, S16)[..., :S] * x.v_scale.reshape(B * H, D, 1)
    assert _rel(v_back, v.permute(0, 2, 3, 1).reshape(B * H, D, S)) < 0.05
    assert not x.vt.reshape(B * H, D, S16)[..., S:].float().any()  # padding is zeros


@pytest.mark.parametrize("variant,tol", [("fp8", 0.08), ("int8qk-fp8pv", 0.07), ("int8qk-bf16pv", 0.02)])
def test_reference_arithmetic_matches_sdpa(variant, tol):
    q, k, v = _qkv(B=1, S=512, H=2, D=128, seed=3)
    v = v + 0.3 * torch.randn(1, 1, 2, 128)  # per-channel offsets
    err = _rel(A.reference_attention(q, k, v, variant), _sdpa(q, k, v))
    assert err < tol, f"{variant}: {err}"


def test_long_flat_softmax_keeps_bf16_pv_error_small():
    # Many tokens, flat softmax, bf16 inputs: the regime where a biased V rounding (the V
    # "smoothing" tried first: mean subtracted, rounded, added back) dominates the tiny output.
    q, k, v = (t.bfloat16() for t in _qkv(B=1, S=8192, H=1, D=128, seed=5))
    err = _rel(A.reference_attention(q.float(), k.float(), v.float(), "int8qk-bf16pv"), _sdpa(q.double(), k.double(), v.double()))
    assert err < 0.02, err


def test_unknown_variant_and_cpu_tensors_fail_clearly():
    q, k, v = _qkv(B=1, S=16, H=1, D=64)
    with pytest.raises(ValueError, match="use one of"):
        A.quantize_attention_inputs(q, k, v, "fp4")
    with pytest.raises(A.AttentionUnavailableError, match="CUDA"):
        A.fp8_attention(q, k, v)


def test_processor_matches_the_stock_self_attention(monkeypatch):
    from diffusers.models.transformers.transformer_wan_animate import WanAttnProcessor

    from newsmotion_engine.bench.gpu import forward_inputs
    from newsmotion_engine.render.backends.wan_animate.components import build_transformer
    from newsmotion_engine.render.backends.wan_animate.config import WanAnimateOptions

    opts = WanAnimateOptions(preset="tiny", device="cpu", dtype="float32")
    cpu = torch.device("cpu")
    model = build_transformer(opts, cpu, torch.float32)
    inputs = forward_inputs(opts.preset_spec.transformer, 32, 32, 5, cpu, torch.float32)
    with torch.no_grad():
        ref = model(**inputs)[0]
    # Route the processor's kernel call to exact SDPA: what is left is our projection/RoPE path.
    monkeypatch.setattr(A, "fp8_attention", lambda q, k, v, variant=None: _sdpa(q, k, v))
    for block in model.blocks:
        block.attn1.set_processor(A.Fp8SelfAttnProcessor())
    with torch.no_grad():
        out = model(**inputs)[0]
    assert _rel(out, ref) < 1e-5
    for block in model.blocks:
        block.attn1.set_processor(WanAttnProcessor())


_INTERPRETED = textwrap.dedent(
    """
    import sys, torch
    from newsmotion_engine.accel import attention as A
    kernel = A._build_kernel(autotune=False)
    F = torch.nn.functional
    # 100 tokens: full tiles and a masked tail; 64: no tail; 20: only the tail.
    for S in (100, 64, 20):
        g = torch.Generator().manual_seed(7)
        q, k, v = (torch.randn(2, S, 2, 64, generator=g) for _ in range(3))
        k = k + 0.5  # channel offsets: the smoothing shift matters for the LSE
        ref = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)).transpose(1, 2)
        for name in ("fp8", "int8qk-fp8pv"):  # the interpreter's bf16 dot is unreliable: no bf16 PV here
            x = A.quantize_attention_inputs(q, k, v, name)
            out = A.launch_kernel(kernel, x, name, BLOCK_M=32, BLOCK_N=32)
            err = float((out.float() - ref).norm() / ref.norm())
            emu = float((out.float() - A.reference_attention(q, k, v, name)).norm() / ref.norm())
            print(S, name, err, emu)
            assert torch.isfinite(out).all() and err < 0.1 and emu < 0.08, (S, name, err, emu)  # a layout or scale bug gives ~1
            # The software-pipelined loop computes the same thing in another order: same bits.
            piped = A.launch_kernel(kernel, x, name, BLOCK_M=32, BLOCK_N=32, PIPELINE_QK=True)
            assert torch.equal(piped, out), (S, name)
            # The log2-sum-exp2 output (split attentions merge through it): same output bits, and
            # with the smoothing shift added back, the exact row LSE within the 8-bit error.
            same, lse = A.launch_kernel(kernel, x, name, BLOCK_M=32, BLOCK_N=32, return_lse=True)
            lse = lse.transpose(1, 2) + A.smoothing_shift(q, k)
            exact = A.reference_attention_lse(q, k, v)[1]
            assert torch.equal(same, out) and float((lse - exact).abs().max()) < 0.1, (S, name, float((lse - exact).abs().max()))
    """
)


def test_triton_kernel_under_the_interpreter(run_interpreted):
    run_interpreted(_INTERPRETED)


def test_attention_config_and_restore(monkeypatch):
    """Through the registry: a diffusers backend is set and reset; the FP8 processors are put in
    and the stock ones come back."""
    import types

    from newsmotion_engine.accel.registry import apply_accelerations, remove_accelerations
    from newsmotion_engine.render.backends.wan_animate.components import build_transformer
    from newsmotion_engine.render.backends.wan_animate.config import WanAnimateOptions

    opts = WanAnimateOptions(preset="tiny", device="cpu", dtype="float32")
    model = build_transformer(opts, torch.device("cpu"), torch.float32)
    comps = types.SimpleNamespace(transformer=model)
    stock = [b.attn1.processor for b in model.blocks]
    applied = apply_accelerations(comps, [A.Attention("flash")])
    assert applied.report["attention"]["diffusers_backend"] == "_native_flash"
    assert all(b.attn1.processor._attention_backend is not None for b in model.blocks)
    remove_accelerations(comps, applied)
    assert all(b.attn1.processor._attention_backend is None for b in model.blocks)
    from diffusers.models.attention_dispatch import _AttentionBackendRegistry

    assert _AttentionBackendRegistry.get_active_backend()[0].value == "native"  # process-wide choice restored too
    monkeypatch.setattr(A, "fp8_attention_supported", lambda: (True, "pretend"))
    applied = apply_accelerations(comps, [A.Attention("fp8-triton", variant="fp8")])
    assert all(isinstance(b.attn1.processor, A.Fp8SelfAttnProcessor) and b.attn1.processor.variant == "fp8" for b in model.blocks)
    assert applied.report["attention"] == {"attention": "fp8-triton", "variant": "fp8", "self_attention_layers": len(stock),
                                           "processor": "Fp8SelfAttnProcessor"}
    remove_accelerations(comps, applied)
    assert [b.attn1.processor for b in model.blocks] == stock
