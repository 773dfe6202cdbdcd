"""OneKeyCross on the CPU: the processor returns what diffusers' processor returns for a one-token
context, falls back for every other call, wraps only stock cross-attention processors, removal,
and the option (taken by the UNet backends, refused by the Wan ones)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("diffusers")

from diffusers.models.attention_processor import Attention, AttnProcessor2_0  # noqa: E402

from newsmotion_engine.accel import registry  # noqa: E402
from newsmotion_engine.accel.one_key_cross import OneKeyCross, OneKeyCrossProcessor, takes_one_key  # noqa: E402


def _cross(**kw) -> Attention:
    torch.manual_seed(0)
    return Attention(query_dim=32, cross_attention_dim=24, heads=4, dim_head=8, **kw).eval()


@pytest.mark.parametrize("kw", [{}, {"residual_connection": True, "rescale_output_factor": 2.0}, {"bias": True, "out_bias": False}])
def test_a_one_token_context_gives_the_stock_processors_output(kw):
    attn = _cross(**kw)
    x, ctx = torch.randn(3, 17, 32) * 4, torch.randn(3, 1, 24) * 4  # large scores: softmax over one key is still 1
    proc = OneKeyCrossProcessor(AttnProcessor2_0())
    with torch.no_grad():
        stock, ours = AttnProcessor2_0()(attn, x, ctx), proc(attn, x, ctx)
    assert ours.shape == stock.shape == (3, 17, 32)
    torch.testing.assert_close(ours, stock, rtol=1e-6, atol=1e-6)
    if not kw.get("residual_connection"):  # without the residual, every token gets the row's context value
        torch.testing.assert_close(stock, stock[:, :1].expand_as(stock), rtol=1e-6, atol=1e-6)


def test_every_other_call_goes_to_the_wrapped_processor():
    attn = _cross()
    x = torch.randn(2, 9, 32)
    calls = []

    def inner(attn, hidden_states, encoder_hidden_states=None, attention_mask=None, temb=None):
        calls.append(encoder_hidden_states)
        return AttnProcessor2_0()(attn, hidden_states, encoder_hidden_states, attention_mask, temb)

    proc = OneKeyCrossProcessor(inner)
    two = torch.randn(2, 2, 24)
    with torch.no_grad():
        torch.testing.assert_close(proc(attn, x, two), AttnProcessor2_0()(attn, x, two))  # two tokens
        proc(attn, x, torch.randn(1, 1, 24))  # a batch that does not match
        proc(attn, x, torch.randn(2, 1, 24), torch.zeros(2, 1, 1))  # a mask
    assert len(calls) == 3
    assert not takes_one_key(attn, x, None, None)  # self-attention
    assert not takes_one_key(attn, torch.randn(2, 32, 3, 3), torch.randn(2, 1, 24), None)  # 4-D input
    normed = Attention(query_dim=32, cross_attention_dim=24, heads=4, dim_head=8, cross_attention_norm="layer_norm")
    assert not takes_one_key(normed, x, torch.randn(2, 1, 24), None)


@dataclass
class _Components:
    unet: torch.nn.Module
    text: torch.nn.Module


def _components():
    unet = torch.nn.ModuleDict({"self": Attention(query_dim=32, heads=4, dim_head=8), "cross": _cross(),
                                "custom": _cross()})  # fmt: skip
    unet["custom"].set_processor(lambda *a, **k: None)  # a custom processor may do more than attend: left alone
    return _Components(unet=unet, text=torch.nn.Linear(4, 4))


def test_it_wraps_only_stock_cross_attention_and_removal_restores_it():
    comps = _components()
    stock = comps.unet["cross"].processor
    applied = registry.apply_accelerations(comps, (OneKeyCross(),))
    assert applied.report["one_key_cross"] == {"modules": {"unet": 1}}
    assert isinstance(comps.unet["cross"].processor, OneKeyCrossProcessor) and comps.unet["cross"].processor.inner is stock
    assert not isinstance(comps.unet["self"].processor, OneKeyCrossProcessor)
    assert not isinstance(comps.unet["custom"].processor, OneKeyCrossProcessor)
    registry.remove_accelerations(comps, applied)
    assert comps.unet["cross"].processor is stock


def test_the_option_parses_for_the_unet_backends_and_the_wan_ones_refuse_it():
    from newsmotion_engine.render.backends.champ.config import ChampOptions
    from newsmotion_engine.render.backends.mimicmotion.config import MimicMotionOptions
    from newsmotion_engine.render.backends.wan_animate.config import WanAnimateOptions
    from newsmotion_engine.render.backends.wan_animate_2.config import WanAnimate2Options

    opts = MimicMotionOptions.from_mapping({"preset": "tiny", "one_key_cross": True, "compile": "blocks"})
    assert [c.technique for c in opts.accelerations] == ["one_key_cross", "compile"]
    assert [c.technique for c in ChampOptions.from_mapping({"one_key_cross": True, "smpl_model": "synthetic"}).accelerations] == ["one_key_cross"]
    assert not MimicMotionOptions.from_mapping({"preset": "tiny", "one_key_cross": False}).accelerations
    for options in (WanAnimateOptions, WanAnimate2Options):
        with pytest.raises(Exception, match="OneKeyCross does not apply: .*512 tokens"):
            options.from_mapping({"one_key_cross": True})


def test_a_transformer_block_with_it_traces_as_one_graph():
    """Compile's regional blocks are ``fullgraph``: the processor's checks must not break the graph."""
    from diffusers.models.attention import BasicTransformerBlock

    from newsmotion_engine.accel.one_key_cross import set_one_key_cross

    torch.manual_seed(0)
    block = BasicTransformerBlock(32, 4, 8, cross_attention_dim=24).eval()
    x, ctx = torch.randn(2, 10, 32), torch.randn(2, 1, 24)
    with torch.no_grad():
        stock = block(x, encoder_hidden_states=ctx)
        assert set_one_key_cross(block, True) == 1
        traced = torch.compile(block, fullgraph=True, backend="eager")(x, encoder_hidden_states=ctx)
    torch.testing.assert_close(traced, stock, rtol=1e-5, atol=1e-5)
