"""The in-context attention's fused input preparation (``accel/attention_prep.py``): its three
Triton passes against the torch path under Triton's interpreter, the torch path against the
processor's unfused ops, the processor's wiring, and the ``Attention.prep`` option."""

from __future__ import annotations

import textwrap

import pytest
import torch

from newsmotion_engine.accel import attention as A
from newsmotion_engine.accel import attention_prep as P
from newsmotion_engine.accel.registry import AccelConfigError


def _inputs(B=2, S=100, H=3, D=16, dtype=torch.bfloat16, seed=0):
    g = torch.Generator().manual_seed(seed)
    n = H * D
    raw = (torch.randn(B, S, 3 * n, generator=g) * 2).to(dtype)
    q, k, v = raw.chunk(3, dim=-1)  # views with a row stride of 3n, as a fused QKV projection hands them on
    k = k + torch.randn(n, generator=g).to(dtype)  # channel offsets: the smoothing has a mean to remove
    wq, wk = ((1 + 0.1 * torch.randn(n, generator=g)).to(dtype) for _ in range(2))
    ang = torch.rand(S, D // 2, generator=g) * 6
    rks = torch.rand(B, 1, H, D, generator=g) * 0.05 + 0.01
    rkm = torch.randn(B, 1, H, D, generator=g) * 0.3
    return q, k, v, wq, wk, 1e-6, ang.cos(), ang.sin(), rks, rkm, H


# The kernels store float32 (the values before the 8-bit cast: the interpreter's own casts round
# differently from the GPU's) and round half to even without libdevice (the interpreter has none).
_INTERPRETED = textwrap.dedent(
    """
    import torch
    from newsmotion_engine.accel import attention_prep as P
    from tests.engine.accel.test_attention_prep import _inputs
    for variant in ("int8qk-fp8pv", "fp8"):
        for shape in ((2, 100, 3, 16), (1, 64, 2, 32)):  # S past a 64-token block and padded to 16; S one block
            args = _inputs(*shape)
            x, r = P.launch(*args, variant, out_dtype=torch.float32, libdevice=False)
            rx, rr = P.incontext_prep_reference(*args, variant)
            S = shape[1]
            assert torch.equal(x.vt[..., S:], torch.zeros_like(x.vt[..., S:]))  # the pad to 16 is zero
            for name, a, b in (("q", x.q, rx.q), ("k", x.k, rx.k), ("rq", r[0], rr[0]), ("vt", x.vt, rx.vt)):
                if b.dtype == torch.float8_e4m3fn:  # cast here with torch's rounding, as the reference does
                    a = a.to(torch.float8_e4m3fn)
                a, b = a.float(), b.float()
                differ = (a != b).float().mean().item()
                # the reciprocal multiply: a quotient within an ulp of a rounding boundary moves one step
                assert differ <= 2e-3, (variant, shape, name, differ)
                int8 = variant == "int8qk-fp8pv" and name != "vt"
                step = torch.ones_like(b) if int8 else (b.abs() / 8).clamp_min(2.0 ** -9)  # one int8 / e4m3 step
                assert ((a - b).abs() <= step).all(), (variant, name, (a - b).abs().max())
            for name, a, b in (("q_scale", x.q_scale, rx.q_scale), ("v_scale", x.v_scale, rx.v_scale),
                               ("rq_scale", r[1], rr[1])):
                assert torch.allclose(a, b, rtol=1e-6, atol=0), (variant, name, ((a - b).abs() / b.abs()).max())
            assert torch.allclose(r[2], rr[2], rtol=1e-4, atol=1e-5), (r[2] - rr[2]).abs().max()  # delta: another summation order
    print("ok")
    """
)


def test_kernels_against_the_torch_path_under_the_interpreter(run_interpreted):
    run_interpreted(_INTERPRETED, timeout=600, ok=True)


def test_the_torch_path_is_the_processors_unfused_arithmetic():
    """``incontext_prep_reference`` = the processor's earlier path: ``RMSNorm`` modules, RoPE via
    ``apply_rope``, :func:`quantize_attention_inputs` and :func:`reference_launch`. The one
    difference allowed: torch's CPU RMSNorm may round its float32 result to bf16 before the weight
    (the GPU's fused op and inductor round once), one bf16 step on some values."""
    from newsmotion_engine.accel.attention_incontext import ReferenceKV, reference_launch
    from newsmotion_engine.render.backends.wan_animate_2.attention import apply_rope

    q, k, v, wq, wk, eps, cos, sin, rks, rkm, H = _inputs(B=1)
    norm_q, norm_k = torch.nn.RMSNorm(q.shape[-1], eps=eps), torch.nn.RMSNorm(q.shape[-1], eps=eps)
    with torch.no_grad():
        norm_q.weight.copy_(wq.float()), norm_k.weight.copy_(wk.float())
    norm_q, norm_k = norm_q.to(torch.bfloat16), norm_k.to(torch.bfloat16)
    angles = [(cos[:, None], sin[:, None])]
    with torch.no_grad():
        qr = apply_rope(norm_q(q).unflatten(2, (H, -1)), angles).to(torch.bfloat16)
        kr = apply_rope(norm_k(k).unflatten(2, (H, -1)), angles).to(torch.bfloat16)
    ours_q = P.norm_rope_reference(q, wq, eps, cos, sin, H)
    assert ((ours_q.float() - qr.float()).abs() <= qr.float().abs() * 2 ** -7 + 1e-6).all()  # within a bf16 step
    assert (ours_q != qr).float().mean() < 0.05
    x = A.quantize_attention_inputs(qr, kr, v.unflatten(2, (H, -1)))
    r = reference_launch(qr, kr, ReferenceKV(x.k, x.vt, rks, rkm, x.v_scale), 1)
    rx, rr = P.incontext_prep_reference(q, k, v, wq, wk, eps, cos, sin, rks, rkm, H)
    assert torch.allclose(rx.q_scale, x.q_scale, rtol=2 ** -7) and torch.allclose(rr[2], r.delta, rtol=0.05, atol=0.05)
    assert (rx.k.float() - x.k.float()).abs().max() <= 2 and (rx.k != x.k).float().mean() < 0.05


def test_off_the_gpu_the_torch_path_runs():
    args = _inputs()
    assert not P.supported(args[0], None)
    x, r = P.incontext_prep(*args)
    rx, rr = P.incontext_prep_reference(*args)
    assert all(torch.equal(a, b) for a, b in zip((*x, *r), (*rx, *rr)))


def test_prep_option_defaults_to_fused_for_the_8bit_kernel_only():
    assert A.Attention(kernel="fp8-triton").prep == "fused"
    assert A.Attention(kernel="fp8-triton", prep="torch").prep == "torch"
    assert A.Attention(kernel="sdpa").prep is None
    with pytest.raises(AccelConfigError, match="prep 'triton'"):
        A.Attention(kernel="fp8-triton", prep="triton")
    with pytest.raises(AccelConfigError, match="'fp8-triton' only"):
        A.Attention(kernel="cudnn", prep="fused")


@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() < (9, 0),
                    reason="the kernels' casts are checked on an sm_90 GPU")  # fmt: skip
def test_on_the_gpu_within_one_step_of_the_torch_path():
    args = [a.cuda() if isinstance(a, torch.Tensor) else a for a in _inputs(B=1, S=1000, H=4, D=128)]
    x, r = P.launch(*args)
    rx, rr = P.incontext_prep_reference(*args)
    for a, b in ((x.q, rx.q), (x.k, rx.k), (r[0], rr[0]), (x.vt, rx.vt)):
        a, b = a.float(), b.float()
        assert (a != b).float().mean() < 1e-2 and ((a - b).abs() <= torch.maximum(b.abs() / 8, torch.ones_like(b))).all()
    assert torch.allclose(x.q_scale, rx.q_scale, rtol=1e-5) and torch.allclose(x.v_scale, rx.v_scale, rtol=1e-6)
