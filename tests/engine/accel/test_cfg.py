"""CFG window math and one-pass momentum CFG."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from newsmotion_engine.accel.cfg import CFGSchedule, CFGStrategy, window_steps  # noqa: E402
from newsmotion_engine.accel.registry import AccelConfigError  # noqa: E402


def test_window_steps():
    assert list(window_steps(CFGSchedule(), 10)) == list(range(10))
    assert list(window_steps(CFGSchedule(start=0.0, stop=0.5), 10)) == [0, 1, 2, 3, 4]
    assert list(window_steps(CFGSchedule(start=0.2, stop=0.8), 10)) == [2, 3, 4, 5, 6, 7]
    assert list(window_steps(CFGSchedule(start=0.25, stop=1.0), 4)) == [1, 2, 3]


@pytest.mark.parametrize(
    "kwargs, words",
    [({"start": 0.6, "stop": 0.4}, "window"), ({"stop": 1.5}, "window"), ({"every": 0}, "every"),
     ({"every": 1.5}, "every"), ({"momentum": 1.0}, "momentum"), ({"start": "a"}, "window")],
)  # fmt: skip
def test_schedule_validation_is_one_clear_error(kwargs, words):
    with pytest.raises(AccelConfigError, match=words):
        CFGSchedule(**kwargs)


def test_schedule_attaches_to_components_and_removal_restores_plain_cfg():
    import types

    from newsmotion_engine.accel.registry import apply_accelerations, remove_accelerations

    comps = types.SimpleNamespace(cfg_schedule=None)
    applied = apply_accelerations(comps, [CFGSchedule(every=2)])
    assert comps.cfg_schedule == CFGSchedule(every=2) and applied.report["cfg"]["every"] == 2
    remove_accelerations(comps, applied)
    assert comps.cfg_schedule is None


def _drive(cfg: CFGStrategy, steps: int):
    g = torch.Generator().manual_seed(0)
    preds, used_uncond = [], []
    for i in range(steps):
        cond = torch.randn(8, generator=g)
        uncond = torch.randn(8, generator=g)
        need = cfg.needs_uncond(i)
        used_uncond.append(need)
        preds.append((cond, uncond, cfg.combine(i, cond, uncond if need else None)))
    return preds, used_uncond


def test_plain_cfg_and_window_formula():
    cfg = CFGStrategy(4.0, steps=6, schedule=CFGSchedule(start=0.0, stop=0.5))
    preds, used = _drive(cfg, 6)
    assert used == [True, True, True, False, False, False]
    for i, (c, u, p) in enumerate(preds):
        expected = u + 4.0 * (c - u) if i < 3 else c
        assert torch.equal(p, expected)
    assert cfg.stats() == {"cond_passes": 6, "uncond_passes": 3, "plain_cfg_passes": 12, "flops_saved": 0.25}


def test_no_guidance_never_runs_uncond():
    cfg = CFGStrategy(1.0, steps=5)
    _, used = _drive(cfg, 5)
    assert not any(used) and cfg.stats()["flops_saved"] == 0.0


def test_one_pass_momentum_reuses_the_cached_delta():
    cfg = CFGStrategy(3.0, steps=6, schedule=CFGSchedule(every=2, momentum=0.5))
    preds, used = _drive(cfg, 6)
    assert used == [True, False, True, False, True, False]
    c0, u0, p0 = preds[0]
    assert torch.allclose(p0, c0 + 2.0 * (c0 - u0))
    c1, _, p1 = preds[1]
    assert torch.allclose(p1, c1 + 2.0 * (c0 - u0))  # cached delta from step 0
    c2, u2, p2 = preds[2]
    d = 0.5 * (c0 - u0) + 0.5 * (c2 - u2)  # momentum-smoothed refresh
    assert torch.allclose(p2, c2 + 2.0 * d)
    c3, _, p3 = preds[3]
    assert torch.allclose(p3, c3 + 2.0 * d)
    assert cfg.stats()["flops_saved"] == 0.25
