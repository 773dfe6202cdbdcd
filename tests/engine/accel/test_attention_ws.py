"""The warp-specialized attention kernel (attention_triton.attention_fwd_ws) under Triton's
interpreter on the CPU, against the one-loop kernel: whole tiles, a ragged end masked in every
tile, and the in-context reference finished by the one-loop kernel from the dense loop's state;
the production switch, what it refuses, and the Triton releases it is not used on."""

from __future__ import annotations


import pytest

torch = pytest.importorskip("torch")

from newsmotion_engine.accel import attention as A  # noqa: E402

_INTERPRETED = """
import torch
from newsmotion_engine.accel import attention as A
from newsmotion_engine.accel import attention_incontext as I
from newsmotion_engine.accel import attention_triton as T

torch.manual_seed(0)
one_loop = A._build_kernel(autotune=False)
for name in ("fp8", "int8qk-fp8pv"):  # the interpreter's bf16 dot is unreliable: no bf16 PV here
    for S in (96, 100):
        q, k, v = (torch.randn(1, S, 2, 64) for _ in range(3))
        k = k + 0.5
        x = A.quantize_attention_inputs(q, k, v, name)
        ref = A.launch_kernel(one_loop, x, name, BLOCK_M=32, BLOCK_N=32)
        out = A.launch_kernel_ws(T.attention_fwd_ws, one_loop, x, name, BLOCK_M=32, BLOCK_N=32, MASK_TAIL=S % 32 != 0)
        diff = float((out.float() - ref.float()).norm() / ref.float().norm())
        print(name, S, "dense", diff)
        assert torch.equal(out, ref), (name, S, diff)  # the same tiles in the same order: the same bits
    # In-context: 3 frames of 40 (tiles across frame boundaries, a ragged end), 8-key head tiles.
    hw, frames = 40, 3
    S = hw * frames
    q, k, v = (torch.randn(1, S, 2, 64) for _ in range(3))
    k_ref, v_ref = torch.randn(1, S - hw, 2, 64) * 1.3 + 0.2, torch.randn(1, S - hw, 2, 64)
    x = A.quantize_attention_inputs(q, k, v, name)
    r = I.reference_launch(q, k, I.prepare_reference(k_ref, v_ref, name), hw, name)
    ref = A.launch_kernel(one_loop, x, name, reference=r, BLOCK_M=32, BLOCK_N=32)
    out = A.launch_kernel_ws(T.attention_fwd_ws, one_loop, x, name, reference=r, BLOCK_M=32, BLOCK_N=32, MASK_TAIL=True,
                           one_loop_meta={"BLOCK_M": 32, "BLOCK_N": 32})
    diff = float((out.float() - ref.float()).norm() / ref.float().norm())
    print(name, "in-context", diff)
    assert torch.equal(out, ref), (name, diff)
print("ok")
"""


def test_the_warp_specialized_kernel_matches_the_one_loop_kernel_under_the_interpreter(run_interpreted):
    run_interpreted(_INTERPRETED, ok=True)


def test_which_launches_it_takes():
    x = A.QuantizedQKV(*(torch.zeros(1, 2, s, 4) for s in (96, 96, 96)), torch.zeros(1, 2, 96), torch.zeros(1, 2, 4))
    assert A.ws_applies(x)
    assert not A.ws_applies(x, return_lse=True)  # the LSE output is the one-loop kernel's
    assert not A.ws_applies(x, sparse=(x.q, x.q, x.q))
    odd = x._replace(q=torch.zeros(1, 2, 98, 4))
    assert not A.ws_applies(odd)  # query scales through TMA: rows of 16-byte multiples
    with pytest.raises(ValueError, match="divisible by 4"):
        A.launch_kernel_ws(None, None, odd)


def test_a_triton_whose_warp_specialization_the_probe_found_broken_warns_once_and_is_not_used(monkeypatch):
    import triton

    monkeypatch.setattr(A, "_WS_WARNED", False)
    monkeypatch.setattr(triton, "__version__", "3.6.0")
    with pytest.warns(RuntimeWarning, match="broken on Triton 3.6.0"):
        assert not A.ws_usable()
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a second warning would raise here
        assert not A.ws_usable()
    monkeypatch.setattr(triton, "__version__", "3.7.0")
    assert A.ws_usable()
