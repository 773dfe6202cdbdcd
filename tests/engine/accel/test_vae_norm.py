"""FusedVaeNorm: it takes the Wan VAE's residual blocks and heads (SiLU only), a tiny Wan VAE
decodes and encodes bit for bit the same on the CPU (the eager path), removal restores the
modules, the option parses for the Wan backends, and the Triton kernel matches the eager norm
and SiLU under Triton's interpreter in both layouts (float32 and bf16, with and without bias)."""

from __future__ import annotations

import textwrap

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("diffusers")

from newsmotion_engine.accel import registry  # noqa: E402
from newsmotion_engine.accel.vae_norm import FusedVaeNorm, norm_act_owners  # noqa: E402


def test_it_takes_the_residual_blocks_and_the_heads(tiny_wan_vae):
    vae, _ = tiny_wan_vae()
    owners = norm_act_owners(vae)
    names = {type(m).__name__ for m in owners}
    assert names == {"WanResidualBlock", "WanEncoder3d", "WanDecoder3d"}
    assert len(owners) == sum(type(m).__name__ == "WanResidualBlock" for m in vae.modules()) + 2
    gelu, _ = tiny_wan_vae()
    for m in norm_act_owners(gelu):
        m.nonlinearity = torch.nn.GELU()  # the fused kernel computes a SiLU: anything else is left alone
    assert norm_act_owners(gelu) == []


def test_a_wan_vae_decodes_and_encodes_the_same_and_removal_restores(tiny_wan_vae):
    vae, comps = tiny_wan_vae()
    video = torch.rand(1, 3, 9, 16, 16) * 2 - 1
    z = torch.randn(1, 4, 3, 6, 6)
    with torch.no_grad():
        decoded, encoded = vae.decode(z).sample, vae.encode(video).latent_dist.mean
        applied = registry.apply_accelerations(comps, (FusedVaeNorm(),))
        assert applied.report["fused_vae_norm"]["modules"]["vae"] == len(norm_act_owners(vae)) > 5
        assert all(isinstance(m.nonlinearity, torch.nn.Identity) for m in norm_act_owners(vae))
        fused_decoded, fused_encoded = vae.decode(z).sample, vae.encode(video).latent_dist.mean
        registry.remove_accelerations(comps, applied)
        assert all(isinstance(m.nonlinearity, torch.nn.SiLU) for m in norm_act_owners(vae))
        assert not any("forward" in vars(m) for m in vae.modules() if type(m).__name__ == "WanRMS_norm")
        restored = vae.decode(z).sample
    assert torch.equal(fused_decoded, decoded) and torch.equal(fused_encoded, encoded)  # CPU: the eager modules
    assert torch.equal(restored, decoded)


def test_the_option_parses_for_the_wan_backends():
    from newsmotion_engine.render.backends.wan.diffusers_config import parse_accelerations

    class _Err(Exception):
        pass

    found = parse_accelerations({"fused_vae_norm": True, "causal_pad_fold": True}, backend="wan-animate-2", error=_Err)
    assert [c.technique for c in found] == ["causal_pad_fold", "fused_vae_norm"]
    assert parse_accelerations({"fused_vae_norm": False}, backend="echomimic-v3", error=_Err) == ()
    with pytest.raises(_Err, match="true or false"):
        parse_accelerations({"fused_vae_norm": 1}, backend="wan-animate-2", error=_Err)


_INTERPRETED = textwrap.dedent(
    """
    import torch, torch.nn.functional as F
    from diffusers.models.autoencoders.autoencoder_kl_wan import WanRMS_norm
    from newsmotion_engine.accel.vae_norm import _flat_positions
    from newsmotion_engine.accel.vae_norm_triton import rms_norm_silu_cuda
    torch.manual_seed(0)
    torch.set_grad_enabled(False)
    for c, bias in ((24, False), (40, True)):
        norm = WanRMS_norm(c, images=False, bias=bias)
        with torch.no_grad():
            norm.gamma.copy_(torch.rand_like(norm.gamma) + 0.5)
            if bias:
                norm.bias.copy_(torch.randn_like(norm.bias))
        for dtype, tol in ((torch.float32, 1e-5), (torch.bfloat16, 2e-2)):
            for fmt in (torch.contiguous_format, torch.channels_last_3d):
                x = (torch.randn(2, c, 3, 5, 7) * 3).to(dtype).contiguous(memory_format=fmt)
                x[0, :, 0, 0, 0] = 0  # a zero position: the clamp to eps, not a division by zero
                ref = F.silu(norm.to(dtype)(x).float())
                got = rms_norm_silu_cuda(x, norm.gamma.to(dtype), norm.bias.to(dtype) if bias else None, float(norm.scale),
                                         _flat_positions(x))
                assert got.dtype == dtype and got.stride() == x.stride(), (got.dtype, got.stride(), x.stride())
                err = float((got.float() - ref).abs().max() / ref.abs().max())
                assert err < tol, (c, bias, dtype, fmt, err)
                at_zero = F.silu(norm.bias.detach().float().flatten() if bias else torch.zeros(c))
                assert torch.allclose(got[0, :, 0, 0, 0].float(), at_zero, atol=tol * 4), (got[0, :, 0, 0, 0], at_zero)
    print("ok")
    """
)


def test_the_kernel_matches_the_eager_norm_and_silu_under_the_interpreter(run_interpreted):
    run_interpreted(_INTERPRETED, timeout=600, ok=True)


def test_positions_must_step_evenly():
    from newsmotion_engine.accel.vae_norm import _flat_positions

    x = torch.randn(1, 4, 3, 5, 6)
    assert _flat_positions(x) == 1
    assert _flat_positions(x.contiguous(memory_format=torch.channels_last_3d)) == 4
    assert _flat_positions(x[:, :, :, :, :3]) is None  # a column slice: rows no longer follow each other
    assert _flat_positions(torch.randn(1, 4, 5, 6)) is None
