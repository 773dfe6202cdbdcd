"""Pyramid cascade: config validation, the low-resolution grid, the step split and the re-noising."""

from __future__ import annotations

import contextlib

import pytest
import torch

from newsmotion_engine.accel.cfg import CFGStrategy
from newsmotion_engine.accel.pyramid import PyramidCascade, low_size
from newsmotion_engine.accel.registry import AccelConfigError, apply_accelerations, remove_accelerations
from newsmotion_engine.render.backends.wan_animate import denoise
from newsmotion_engine.render.backends.wan_animate.config import WanAnimateConfigError, parse_accelerations


class _Recorder:
    """A transformer stand-in: records the latent grid of every call and predicts a constant
    velocity ``v`` (so the clean estimate is ``x - sigma v``)."""

    class config:  # noqa: N801 - mirrors diffusers' model.config
        patch_size = (1, 2, 2)

    def __init__(self, v: float = 0.5):
        self.v, self.grids, self.steps = v, [], []

    @contextlib.contextmanager
    def cache_context(self, name, step_index, num_inference_steps):
        self.steps.append(step_index)
        yield

    def __call__(self, hidden_states, **kw):
        self.grids.append(tuple(hidden_states.shape[-2:]))
        assert kw["pose_hidden_states"].shape[-2:] == hidden_states.shape[-2:]  # pose latents follow the grid
        return (torch.full((1, 16, *hidden_states.shape[2:]), self.v),)


def _scheduler():
    from diffusers import UniPCMultistepScheduler

    return UniPCMultistepScheduler(prediction_type="flow_prediction", use_flow_sigmas=True, flow_shift=5.0)


def _inputs(t, h, w):
    return denoise.SegmentInputs(
        reference_latents=torch.zeros(1, 20, t, h, w), pose_latents=torch.randn(1, 16, t - 1, h, w)[:, :, [0] * t],
        face_pixels=torch.zeros(1, 3, 5, 16, 16), prompt_embeds=torch.zeros(1, 4, 8), negative_embeds=None,
        image_embeds=torch.zeros(1, 2, 8),
    )  # fmt: skip


def test_config_is_validated_once():
    assert PyramidCascade().low_steps == 1 and PyramidCascade().factor == 2
    for bad in ({"low_steps": 0}, {"low_steps": 1.5}, {"factor": 3}, {"factor": True}):
        with pytest.raises(AccelConfigError):
            PyramidCascade(**bad)
    with pytest.raises(AccelConfigError, match="no full-resolution step"):
        PyramidCascade(low_steps=4).check_steps(4)
    assert parse_accelerations({"pyramid_low_steps": 2}) == (PyramidCascade(low_steps=2),)
    assert parse_accelerations({"pyramid_low_steps": 0}) == ()
    with pytest.raises(WanAnimateConfigError, match="pyramid_factor=3"):
        parse_accelerations({"pyramid_low_steps": 1, "pyramid_factor": 3})


def test_low_grid_keeps_patch_multiples():
    assert low_size(160, 90, 2) == (80, 46)  # 720x1280: 90 latent columns -> 46 (45 is not a patch multiple)
    assert low_size(16, 8, 2) == (8, 4) and low_size(16, 8, 4) == (4, 2) and low_size(4, 4, 4) == (2, 2)


def test_apply_attaches_and_remove_detaches():
    class Components:
        pass

    comps = Components()
    applied = apply_accelerations(comps, (PyramidCascade(low_steps=2),))
    assert comps.pyramid == PyramidCascade(low_steps=2) and applied.report == {"pyramid": {"low_steps": 2, "factor": 2}}
    remove_accelerations(comps, applied)
    assert comps.pyramid is None


@pytest.mark.parametrize("low_steps", [1, 2, 3])
def test_first_steps_run_on_the_low_grid(low_steps):
    model = _Recorder()
    noise = torch.randn(1, 16, 3, 16, 12)
    out = denoise.denoise_segment(model, _scheduler(), noise, _inputs(3, 16, 12), steps=4, cfg=CFGStrategy(1.0, 4),
                                  dtype=torch.float32, pyramid=PyramidCascade(low_steps=low_steps), new_scheduler=_scheduler)  # fmt: skip
    assert model.grids == [(8, 6)] * low_steps + [(16, 12)] * (4 - low_steps)
    assert model.steps == [0, 1, 2, 3]  # global step numbers carry through (CFG window, TeaCache)
    assert out.shape == noise.shape and torch.isfinite(out).all()


def test_switch_renoises_the_upsampled_estimate_on_the_schedule():
    # One low step with a constant velocity v: the clean estimate is x_low - sigma_0 v everywhere
    # (a constant field, so upsampling is exact); the first full-resolution call must see
    # (1 - sigma_1) x0 + sigma_1 noise.
    v = 0.5
    seen = {}

    class Spy(_Recorder):
        def __call__(self, hidden_states, **kw):
            if hidden_states.shape[-2:] == (16, 12) and "x" not in seen:
                seen["x"] = hidden_states[:, :16].clone()
            return super().__call__(hidden_states, **kw)

    noise = torch.randn(1, 16, 3, 16, 12)
    low = torch.nn.functional.interpolate(noise.permute(0, 2, 1, 3, 4).reshape(3, 16, 16, 12), size=(8, 6), mode="area")
    low = (low / low.std()).reshape(1, 3, 16, 8, 6).permute(0, 2, 1, 3, 4)
    sched = _scheduler()
    sched.set_timesteps(4)
    s0, s1 = float(sched.sigmas[0]), float(sched.sigmas[1])
    denoise.denoise_segment(Spy(v), _scheduler(), noise, _inputs(3, 16, 12), steps=4, cfg=CFGStrategy(1.0, 4), dtype=torch.float32,
                            pyramid=PyramidCascade(low_steps=1), new_scheduler=_scheduler)  # fmt: skip
    x0_low = low - s0 * v
    up = torch.nn.functional.interpolate(x0_low.permute(0, 2, 1, 3, 4).reshape(3, 16, 8, 6), size=(16, 12), mode="bilinear")
    up = up.reshape(1, 3, 16, 16, 12).permute(0, 2, 1, 3, 4)
    expected = (1 - s1) * up + s1 * noise
    assert torch.allclose(seen["x"], expected, atol=1e-5)


def test_a_pyramid_needs_a_scheduler_for_the_full_steps():
    with pytest.raises(ValueError, match="new_scheduler"):
        denoise.denoise_segment(_Recorder(), _scheduler(), torch.randn(1, 16, 3, 16, 12), _inputs(3, 16, 12), steps=4,
                                cfg=CFGStrategy(1.0, 4), dtype=torch.float32, pyramid=PyramidCascade())  # fmt: skip
