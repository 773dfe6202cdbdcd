"""TemporalConv on the CPU: which convolutions it takes, the same outputs (contiguous and
channels-last inputs, padded and 1x1x1 kernels), state-dict keys kept, removal, the option."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("diffusers")

from newsmotion_engine.accel import registry  # noqa: E402
from newsmotion_engine.accel.temporal_conv import (  # noqa: E402
    HOOK_NAME,
    TemporalConv,
    is_temporal_conv,
    temporal_conv2d,
    temporal_conv_modules,
)


@dataclass
class _Components:
    unet: torch.nn.Module
    image: torch.nn.Module
    dtype: torch.dtype = torch.float32


def _components():
    torch.manual_seed(0)
    unet = torch.nn.Sequential(torch.nn.Conv3d(4, 8, (3, 1, 1), padding=(1, 0, 0)), torch.nn.SiLU(),
                               torch.nn.Conv3d(8, 8, (1, 1, 1)),  # a shortcut
                               torch.nn.Conv3d(8, 4, (3, 3, 3), padding=1))  # spatial too: left alone  # fmt: skip
    image = torch.nn.Sequential(torch.nn.Conv2d(4, 4, 3, padding=1))
    return _Components(unet=unet, image=image)


def test_only_time_only_3d_convolutions_count():
    assert is_temporal_conv(torch.nn.Conv3d(2, 2, (3, 1, 1), padding=(1, 0, 0)))
    assert is_temporal_conv(torch.nn.Conv3d(2, 2, (5, 1, 1)))  # no padding: fewer frames out, still exact
    assert not is_temporal_conv(torch.nn.Conv3d(2, 2, (3, 3, 3), padding=1))
    assert not is_temporal_conv(torch.nn.Conv3d(2, 2, (3, 1, 1), stride=(2, 1, 1)))
    assert not is_temporal_conv(torch.nn.Conv3d(2, 2, (3, 1, 1), padding=(1, 1, 1)))
    assert not is_temporal_conv(torch.nn.Conv3d(2, 2, (3, 1, 1), padding=(1, 0, 0), padding_mode="replicate"))
    assert not is_temporal_conv(torch.nn.Conv3d(4, 4, (3, 1, 1), padding="same", groups=2))
    assert not is_temporal_conv(torch.nn.Conv2d(2, 2, (3, 1)))


@pytest.mark.parametrize("channels_last", [False, True])
def test_as_2d_it_computes_the_same_numbers(channels_last):
    torch.manual_seed(1)
    conv = torch.nn.Conv3d(6, 5, (3, 1, 1), padding=(1, 0, 0))
    x = torch.randn(2, 6, 7, 5, 9)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last_3d)
    ref = conv(x)
    out = temporal_conv2d(conv, x)
    assert out.shape == ref.shape == (2, 5, 7, 5, 9)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)


def test_it_hooks_the_models_gives_the_same_outputs_and_removes_cleanly():
    comps = _components()
    x = torch.randn(1, 4, 6, 8, 8)
    before = comps.unet(x)
    keys = list(comps.unet.state_dict())
    assert temporal_conv_modules(comps) == ["unet"]  # the 2-D model is left alone
    applied = registry.apply_accelerations(comps, (TemporalConv(),))
    assert applied.report["temporal_conv"] == {"modules": {"unet": 2}}
    calls = []
    original = torch.nn.functional.conv3d
    torch.nn.functional.conv3d = lambda *a, **k: calls.append(a[1].shape) or original(*a, **k)
    try:
        out = comps.unet(x)
    finally:
        torch.nn.functional.conv3d = original
    assert calls == [torch.Size([4, 8, 3, 3, 3])]  # only the spatial one still runs as 3-D
    torch.testing.assert_close(out, before, rtol=1e-5, atol=1e-5)
    assert list(comps.unet.state_dict()) == keys  # the loaded model's keys are unchanged
    registry.remove_accelerations(comps, applied)
    from diffusers.hooks import HookRegistry

    assert HookRegistry.check_if_exists_or_initialize(comps.unet[0]).get_hook(HOOK_NAME) is None
    torch.testing.assert_close(comps.unet(x), before)


def test_it_takes_named_modules_and_refuses_unknown_ones():
    comps = _components()
    with pytest.raises(registry.AccelConfigError, match="no module 'vae'"):
        registry.apply_accelerations(comps, (TemporalConv(modules=("vae",)),))
    with pytest.raises(registry.AccelConfigError, match="tuple of component attribute names"):
        TemporalConv(modules="unet")


def test_the_option_parses_and_mimicmotion_takes_it():
    from newsmotion_engine.render.backends.mimicmotion.config import MimicMotionOptions

    opts = MimicMotionOptions.from_mapping({"preset": "tiny", "temporal_conv": True, "compile": "blocks"})
    assert [c.technique for c in opts.accelerations] == ["temporal_conv", "compile"]
    assert not MimicMotionOptions.from_mapping({"preset": "tiny", "temporal_conv": False}).accelerations
    with pytest.raises(Exception, match="true or false"):
        MimicMotionOptions.from_mapping({"preset": "tiny", "temporal_conv": "yes"})
