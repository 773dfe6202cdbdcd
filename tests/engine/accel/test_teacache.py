"""TeaCache hook on a tiny Animate transformer: threshold 0 is bit-identical, a high threshold
skips, cond/uncond keep separate state, reset reproduces, removal restores the model."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("diffusers")

from newsmotion_engine.accel.registry import AccelConfigError  # noqa: E402
from newsmotion_engine.accel.teacache import (  # noqa: E402
    TeaCache,
    apply_teacache,
    fit_rescale,
    recorded_pairs,
    remove_teacache,
    reset_teacache,
    teacache_stats,
)
from newsmotion_engine.bench.gpu import forward_inputs  # noqa: E402
from newsmotion_engine.render.backends.wan_animate.components import build_transformer  # noqa: E402
from newsmotion_engine.render.backends.wan_animate.config import WanAnimateOptions  # noqa: E402

OPTS = WanAnimateOptions(preset="tiny", device="cpu", dtype="float32")
TIMESTEPS = [999.0, 900.0, 880.0, 870.0, 700.0, 500.0]


@pytest.fixture(scope="module")
def model_and_inputs():
    model = build_transformer(OPTS, torch.device("cpu"), torch.float32)
    inputs = forward_inputs(OPTS.preset_spec.transformer, 32, 32, 5, torch.device("cpu"), torch.float32)
    return model, inputs


def _run(model, inputs, context="cond"):
    outs = []
    with torch.no_grad():
        for i, t in enumerate(TIMESTEPS):
            x = inputs["hidden_states"] * (1 - 0.05 * i)  # the latents move a little each step
            with model.cache_context(context, step_index=i):
                outs.append(model(**{**inputs, "hidden_states": x, "timestep": torch.tensor([t])})[0])
    return outs


def test_threshold_zero_is_bit_identical(model_and_inputs):
    model, inputs = model_and_inputs
    plain = _run(model, inputs)
    apply_teacache(model, TeaCache(threshold=0.0))
    try:
        cached = _run(model, inputs)
        assert teacache_stats(model) == {"computed": len(TIMESTEPS), "skipped": 0, "skip_ratio": 0.0}
    finally:
        remove_teacache(model)
    assert all(torch.equal(a, b) for a, b in zip(plain, cached))


def test_high_threshold_skips_and_reuses_the_previous_output(model_and_inputs):
    model, inputs = model_and_inputs
    apply_teacache(model, TeaCache(threshold=10.0, warmup_steps=2))
    try:
        outs = _run(model, inputs)
        stats = teacache_stats(model)
        assert stats["computed"] == 2 and stats["skipped"] == len(TIMESTEPS) - 2
        assert all(torch.equal(o, outs[1]) for o in outs[2:])
    finally:
        remove_teacache(model)


def test_moderate_threshold_computes_some_and_skips_some(model_and_inputs):
    model, inputs = model_and_inputs
    apply_teacache(model, TeaCache(threshold=0.5, warmup_steps=1))
    try:
        _run(model, inputs)
        stats = teacache_stats(model)
        assert 0 < stats["skipped"] < len(TIMESTEPS) - 1
    finally:
        remove_teacache(model)


def test_cond_and_uncond_state_are_separate_and_reset_reproduces(model_and_inputs):
    model, inputs = model_and_inputs
    apply_teacache(model, TeaCache(threshold=10.0, warmup_steps=1))
    try:
        _run(model, inputs, "cond")
        # A fresh context computes its first call even though "cond" is skipping everything.
        first_uncond = _run(model, inputs, "uncond")
        assert teacache_stats(model)["computed"] == 2
        reset_teacache(model)
        again = _run(model, inputs, "uncond")
        assert all(torch.equal(a, b) for a, b in zip(first_uncond, again))
        assert teacache_stats(model)["computed"] == 1
    finally:
        remove_teacache(model)
    with pytest.raises(ValueError, match="cache context"):
        apply_teacache(model, TeaCache())
        try:
            model(**inputs)
        finally:
            remove_teacache(model)


def test_removal_restores_forward_and_calibration_fits(model_and_inputs):
    model, inputs = model_and_inputs
    plain = _run(model, inputs)
    apply_teacache(model, TeaCache(threshold=0.0, record=True))
    _run(model, inputs)
    pairs = recorded_pairs(model)
    remove_teacache(model)
    assert len(pairs) == len(TIMESTEPS) - 1
    coeffs = fit_rescale(pairs, degree=2)
    assert len(coeffs) == 3
    with pytest.raises(ValueError, match="more than 4"):
        fit_rescale(pairs[:2], degree=4)
    assert all(torch.equal(a, b) for a, b in zip(plain, _run(model, inputs)))


@pytest.mark.parametrize(
    "kwargs, words",
    [({"threshold": -0.1}, "threshold"), ({"threshold": 11}, "threshold"), ({"warmup_steps": -1}, "warmup"),
     ({"coefficients": ()}, "coefficients"), ({"coefficients": ("a",)}, "coefficients"),
     ({"threshold": 0.15, "record": True}, "record needs threshold 0")],
)  # fmt: skip
def test_config_validation_is_one_clear_error(kwargs, words):
    with pytest.raises(AccelConfigError, match=words):
        TeaCache(**kwargs)
    assert TeaCache(coefficients=[2, 1]).coefficients == (2.0, 1.0)
