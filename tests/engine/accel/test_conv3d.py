"""Conv3dAs2d on the CPU: which convolutions it takes, the same outputs (time-only and full 3-D
kernels, padded or not, contiguous and channels-last inputs, Wan's causal convolution with its
frame cache), state-dict keys kept, removal, the option."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

torch = pytest.importorskip("torch")

from newsmotion_engine.accel import registry  # noqa: E402
from newsmotion_engine.accel.conv3d import Conv3dAs2d, conv3d_as_2d, conv3d_modules, is_eligible  # noqa: E402


@dataclass
class _Components:
    unet: torch.nn.Module
    image: torch.nn.Module
    dtype: torch.dtype = torch.float32


def _components():
    torch.manual_seed(0)
    unet = torch.nn.Sequential(torch.nn.Conv3d(4, 8, (3, 1, 1), padding=(1, 0, 0)), torch.nn.SiLU(),
                               torch.nn.Conv3d(8, 8, (1, 1, 1)),  # a shortcut
                               torch.nn.Conv3d(8, 4, (3, 3, 3), padding=1),
                               torch.nn.Conv3d(4, 4, 3, stride=(1, 2, 2)))  # strided: left alone  # fmt: skip
    image = torch.nn.Sequential(torch.nn.Conv2d(4, 4, 3, padding=1))
    return _Components(unet=unet, image=image)


def test_which_convolutions_are_eligible():
    assert is_eligible(torch.nn.Conv3d(2, 2, (3, 1, 1), padding=(1, 0, 0)))
    assert is_eligible(torch.nn.Conv3d(2, 2, (3, 3, 3), padding=1))
    assert is_eligible(torch.nn.Conv3d(2, 2, (5, 1, 1)))
    assert not is_eligible(torch.nn.Conv3d(2, 2, (3, 1, 1), stride=(2, 1, 1)))
    assert not is_eligible(torch.nn.Conv3d(2, 2, 3, dilation=2))
    assert not is_eligible(torch.nn.Conv3d(2, 2, 3, padding=1, padding_mode="replicate"))
    assert not is_eligible(torch.nn.Conv3d(4, 4, 3, padding="same"))
    assert not is_eligible(torch.nn.Conv3d(4, 4, 3, groups=2))
    assert not is_eligible(torch.nn.Conv2d(2, 2, 3))


@pytest.mark.parametrize("kernel, padding", [((3, 1, 1), (1, 0, 0)), ((1, 1, 1), (0, 0, 0)), ((3, 3, 3), (1, 1, 1)),
                                             ((3, 3, 3), (0, 1, 1)), ((2, 3, 1), (0, 1, 0)), ((3, 3, 3), (0, 0, 0))])  # fmt: skip
@pytest.mark.parametrize("channels_last", [False, True])
def test_by_2d_convolutions_it_computes_the_same_numbers(kernel, padding, channels_last):
    torch.manual_seed(1)
    conv = torch.nn.Conv3d(6, 5, kernel, padding=padding)
    x = torch.randn(2, 6, 7, 5, 9)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last_3d)
        conv.weight.data = conv.weight.data.contiguous(memory_format=torch.channels_last_3d)
    ref = conv(x)
    out = conv3d_as_2d(x, conv.weight, conv.bias, padding)
    assert out.shape == ref.shape
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)


def test_it_changes_the_models_gives_the_same_outputs_and_removes_cleanly():
    comps = _components()
    x = torch.randn(1, 4, 6, 8, 8)
    before = comps.unet(x)
    keys = list(comps.unet.state_dict())
    assert conv3d_modules(comps) == ["unet"]  # the 2-D model is left alone
    applied = registry.apply_accelerations(comps, (Conv3dAs2d(),))
    assert applied.report["conv3d_as_2d"] == {"modules": {"unet": 3}}
    calls = []
    original = torch.nn.functional.conv3d
    torch.nn.functional.conv3d = lambda *a, **k: calls.append(tuple(a[1].shape)) or original(*a, **k)
    try:
        out = comps.unet(x)
    finally:
        torch.nn.functional.conv3d = original
    assert calls == [(4, 4, 3, 3, 3)]  # only the strided one still runs as 3-D
    torch.testing.assert_close(out, before, rtol=1e-5, atol=1e-5)
    assert list(comps.unet.state_dict()) == keys  # the loaded model's keys are unchanged
    registry.remove_accelerations(comps, applied)
    assert all("_conv_forward" not in m.__dict__ for m in comps.unet.modules())
    torch.testing.assert_close(comps.unet(x), before)


def test_wans_causal_convolution_keeps_its_cache_and_padding():
    """The Wan VAE decodes one latent frame at a time, each causal convolution concatenating the
    frames it cached from the last call: the decode is the same through the 2-D path."""
    pytest.importorskip("diffusers")
    from diffusers import AutoencoderKLWan

    torch.manual_seed(0)
    vae = AutoencoderKLWan(base_dim=16, z_dim=4, dim_mult=[1, 2, 2, 2], num_res_blocks=1, temperal_downsample=[False, True, True]).eval()
    z = torch.randn(1, 4, 3, 6, 6)
    with torch.no_grad():
        before = vae.decode(z).sample
        applied = registry.apply_accelerations(_Vae(vae), (Conv3dAs2d(),))
        assert applied.report["conv3d_as_2d"]["modules"]["vae"] > 10
        after = vae.decode(z).sample
        registry.remove_accelerations(_Vae(vae), applied)
    torch.testing.assert_close(after, before, rtol=1e-4, atol=1e-5)


@dataclass
class _Vae:
    vae: torch.nn.Module


def test_it_takes_named_modules_and_refuses_unknown_ones():
    comps = _components()
    with pytest.raises(registry.AccelConfigError, match="no module 'vae'"):
        registry.apply_accelerations(comps, (Conv3dAs2d(modules=("vae",)),))
    with pytest.raises(registry.AccelConfigError, match="tuple of component attribute names"):
        Conv3dAs2d(modules="unet")


def test_the_option_parses_and_mimicmotion_takes_it():
    from newsmotion_engine.render.backends.mimicmotion.config import MimicMotionOptions

    opts = MimicMotionOptions.from_mapping({"preset": "tiny", "conv3d_as_2d": True, "compile": "blocks"})
    assert [c.technique for c in opts.accelerations] == ["conv3d_as_2d", "compile"]
    assert not MimicMotionOptions.from_mapping({"preset": "tiny", "conv3d_as_2d": False}).accelerations
    with pytest.raises(Exception, match="true or false"):
        MimicMotionOptions.from_mapping({"preset": "tiny", "conv3d_as_2d": "yes"})
