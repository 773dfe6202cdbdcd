"""CausalPadFold on the CPU: it takes only Wan's causal convolutions, a tiny Wan VAE encodes and
decodes the same with it (alone and with conv3d_as_2d), removal restores the release's forward
and padding, the option parses for the Wan backends."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("diffusers")

from diffusers.models.autoencoders.autoencoder_kl_wan import WanCausalConv3d  # noqa: E402

from newsmotion_engine.accel import registry  # noqa: E402
from newsmotion_engine.accel.causal_pad import CausalPadFold, is_causal_conv  # noqa: E402
from newsmotion_engine.accel.conv3d import Conv3dAs2d  # noqa: E402


def test_it_takes_only_wans_causal_convolutions():
    assert is_causal_conv(WanCausalConv3d(2, 2, 3, padding=1))
    assert is_causal_conv(WanCausalConv3d(2, 2, 1))
    assert not is_causal_conv(torch.nn.Conv3d(2, 2, 3, padding=1))  # a plain one pads itself already
    assert not is_causal_conv(torch.nn.Conv2d(2, 2, 3))


@pytest.mark.parametrize("with_2d", [False, True])
def test_a_wan_vae_encodes_and_decodes_the_same(with_2d, tiny_wan_vae):
    vae, comps = tiny_wan_vae()
    video = torch.rand(1, 3, 9, 16, 16) * 2 - 1
    z = torch.randn(1, 4, 3, 6, 6)
    configs = (CausalPadFold(), Conv3dAs2d()) if with_2d else (CausalPadFold(),)
    with torch.no_grad():
        decoded = vae.decode(z).sample
        encoded = vae.encode(video).latent_dist.mean
        applied = registry.apply_accelerations(comps, configs)
        n = applied.report["causal_pad_fold"]["modules"]["vae"]
        assert n == sum(isinstance(m, WanCausalConv3d) for m in vae.modules()) > 10
        calls = []
        original = torch.nn.functional.pad
        torch.nn.functional.pad = lambda x, pad, *a, **k: calls.append(tuple(pad)) or original(x, pad, *a, **k)
        try:
            decoded_folded = vae.decode(z).sample
        finally:
            torch.nn.functional.pad = original
        encoded_folded = vae.encode(video).latent_dist.mean
        registry.remove_accelerations(comps, applied)
        assert not any(p[:4] != (0, 0, 0, 0) for p in calls if len(p) == 6)  # no spatial F.pad left
        assert all("forward" not in m.__dict__ and tuple(m.padding) == (0, 0, 0) for m in vae.modules() if is_causal_conv(m))
        restored = vae.decode(z).sample
    torch.testing.assert_close(decoded_folded, decoded, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(encoded_folded, encoded, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(restored, decoded)


def test_the_option_parses_for_the_wan_backends():
    from newsmotion_engine.render.backends.wan.diffusers_config import parse_accelerations

    class _Err(Exception):
        pass

    assert [c.technique for c in parse_accelerations({"causal_pad_fold": True, "conv3d_as_2d": True},
                                                     backend="wan-animate-2", error=_Err)] == ["causal_pad_fold", "conv3d_as_2d"]  # fmt: skip
    assert parse_accelerations({"causal_pad_fold": False}, backend="wan-animate-2", error=_Err) == ()
    with pytest.raises(_Err, match="true or false"):
        parse_accelerations({"causal_pad_fold": "yes"}, backend="wan-animate-2", error=_Err)
