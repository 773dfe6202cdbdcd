"""ChannelsLast on the CPU: which modules it converts, the same outputs, removal, the option."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

torch = pytest.importorskip("torch")

from newsmotion_engine.accel import registry  # noqa: E402
from newsmotion_engine.accel.memory_format import ChannelsLast, conv_modules  # noqa: E402


@dataclass
class _Components:
    unet: torch.nn.Module
    video: torch.nn.Module
    text: torch.nn.Module
    dtype: torch.dtype = torch.float32


def _components():
    torch.manual_seed(0)
    unet = torch.nn.Sequential(torch.nn.Conv2d(4, 8, 3, padding=1), torch.nn.SiLU(), torch.nn.GroupNorm(2, 8),
                               torch.nn.Conv2d(8, 4, 3, padding=1))  # fmt: skip
    video = torch.nn.Sequential(torch.nn.Conv3d(4, 4, (3, 1, 1), padding=(1, 0, 0)))
    return _Components(unet=unet, video=video, text=torch.nn.Linear(4, 4))


def test_it_converts_the_convolution_models_and_gives_the_same_outputs():
    comps = _components()
    x, x5 = torch.randn(2, 4, 16, 24), torch.randn(1, 4, 5, 8, 8)
    before, before5 = comps.unet(x), comps.video(x5)
    assert conv_modules(comps) == ["unet", "video"]  # the linear-only model is left alone
    applied = registry.apply_accelerations(comps, (ChannelsLast(),))
    assert applied.report["channels_last"] == {"modules": {"unet": 2, "video": 1}}
    assert comps.unet[0].weight.is_contiguous(memory_format=torch.channels_last)
    assert comps.video[0].weight.is_contiguous(memory_format=torch.channels_last_3d)
    out = comps.unet(x)
    assert out.is_contiguous(memory_format=torch.channels_last)  # the activations follow the weights
    torch.testing.assert_close(out, before, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(comps.video(x5), before5, rtol=1e-5, atol=1e-5)
    registry.remove_accelerations(comps, applied)
    assert comps.unet[0].weight.is_contiguous() and comps.video[0].weight.is_contiguous()


def test_it_takes_named_modules_and_refuses_unknown_ones():
    comps = _components()
    applied = registry.apply_accelerations(comps, (ChannelsLast(modules=("unet",)),))
    assert applied.report["channels_last"] == {"modules": {"unet": 2}}
    assert comps.video[0].weight.is_contiguous()
    registry.remove_accelerations(comps, applied)
    with pytest.raises(registry.AccelConfigError, match="no module 'vae'"):
        registry.apply_accelerations(comps, (ChannelsLast(modules=("vae",)),))
    with pytest.raises(registry.AccelConfigError, match="tuple of component attribute names"):
        ChannelsLast(modules="unet")


def test_the_option_parses_and_the_unet_backends_take_it():
    from newsmotion_engine.render.backends.mimicmotion.config import MimicMotionOptions

    opts = MimicMotionOptions.from_mapping({"preset": "tiny", "channels_last": True, "compile": "blocks"})
    assert [c.technique for c in opts.accelerations] == ["channels_last", "compile"]
    assert not MimicMotionOptions.from_mapping({"preset": "tiny", "channels_last": False}).accelerations
    with pytest.raises(Exception, match="true or false"):
        MimicMotionOptions.from_mapping({"preset": "tiny", "channels_last": "yes"})
