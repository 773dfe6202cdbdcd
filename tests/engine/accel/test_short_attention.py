"""``ShortAttention``: the packed short-sequence kernel under Triton's CPU interpreter against
SDPA (ragged sequence counts, padded rows and channels), the processor's whole path there against
diffusers' stock processor, and the registry toggle: only stock self-attention is wrapped, a call
it does not take goes to the stock processor, removing it puts the processors back."""

from __future__ import annotations

import textwrap
import types

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("diffusers")

_INTERPRETED = textwrap.dedent(
    """
    import torch
    from diffusers.models.attention_processor import Attention, AttnProcessor2_0
    from newsmotion_engine.accel import short_attention as SA
    F = torch.nn.functional
    # (batch, frames, heads, head size): champ's 24 frames x 40; a ragged last program (5 x 3
    # sequences, 4 a program); the 32-row maximum; one token.
    for B, S, H, d in ((6, 24, 2, 40), (5, 7, 3, 64), (3, 32, 1, 40), (4, 1, 2, 8)):
        g = torch.Generator().manual_seed(0)
        q, k, v = (torch.randn(B, S, H * d, generator=g) for _ in range(3))
        ref = F.scaled_dot_product_attention(*(t.unflatten(2, (H, d)).transpose(1, 2) for t in (q, k, v))).transpose(1, 2).flatten(2)
        out = SA.short_attention(q, k, v, H, seq_per_program=4)
        assert float((out - ref).abs().max()) < 1e-5, (B, S, H, d)
    # The processor's whole path (projections, the op, output projection) against the stock one.
    SA._on_kernel_device = lambda x: True
    torch.manual_seed(0)
    attn = Attention(query_dim=80, heads=2, dim_head=40, processor=AttnProcessor2_0()).eval()
    x = torch.randn(12, 24, 80)
    with torch.no_grad():
        stock = attn(x)
        attn.set_processor(SA.ShortAttentionProcessor(attn.processor))
        ours = attn(x)
        longer = attn(torch.randn(2, 40, 80))  # over 32 tokens: the stock processor's call
    assert float((ours - stock).abs().max()) < 1e-5, float((ours - stock).abs().max())
    assert longer.shape == (2, 40, 80)
    print("ok")
    """
)


def test_kernel_and_processor_under_the_interpreter(run_interpreted):
    run_interpreted(_INTERPRETED, ok=True)


def test_toggle_wraps_stock_self_attention_only_and_falls_back_on_the_cpu():
    from diffusers.models.attention_processor import Attention, AttnProcessor2_0

    from newsmotion_engine.accel.registry import apply_accelerations, remove_accelerations
    from newsmotion_engine.accel.short_attention import ShortAttention, ShortAttentionProcessor

    class Custom(AttnProcessor2_0):  # a backend's own processor (e.g. champ's reference reader): left alone
        pass

    torch.manual_seed(0)
    net = torch.nn.ModuleDict({
        "self": Attention(query_dim=32, heads=2, dim_head=16, processor=AttnProcessor2_0()),
        "cross": Attention(query_dim=32, cross_attention_dim=8, heads=2, dim_head=16, processor=AttnProcessor2_0()),
        "custom": Attention(query_dim=32, heads=2, dim_head=16, processor=Custom()),
    }).eval()  # fmt: skip
    comps = types.SimpleNamespace(unet=net)
    x = torch.randn(3, 24, 32)
    with torch.no_grad():
        before = net["self"](x)
        applied = apply_accelerations(comps, (ShortAttention(),))
        assert applied.report["short_attention"] == {"modules": {"unet": 1}}
        assert isinstance(net["self"].processor, ShortAttentionProcessor)
        assert type(net["cross"].processor) is AttnProcessor2_0 and type(net["custom"].processor) is Custom
        assert torch.equal(net["self"](x), before)  # a CPU tensor: the stock processor's call
        remove_accelerations(comps, applied)
    assert type(net["self"].processor) is AttnProcessor2_0


def test_bad_shapes_are_refused_before_any_launch():
    from newsmotion_engine.accel.short_attention import short_attention

    q = torch.zeros(2, 33, 64)
    with pytest.raises(ValueError, match="short attention"):
        short_attention(q, q, q, 1)
    q = torch.zeros(2, 8, 128)
    with pytest.raises(ValueError, match="short attention"):
        short_attention(q, q, q, 1)  # a 128-wide head
