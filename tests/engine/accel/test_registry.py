"""The acceleration registry: explicit order, JSON-able report, removal in reverse order back to
the stock model, irreversible FP8 declared and refused, rollback on a failed apply."""

from __future__ import annotations

import json
import types
from dataclasses import dataclass
from typing import ClassVar

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("diffusers")

from newsmotion_engine.accel import registry as R  # noqa: E402
from newsmotion_engine.accel.attention import Attention, AttentionUnavailableError  # noqa: E402
from newsmotion_engine.accel.cfg import CFGSchedule  # noqa: E402
from newsmotion_engine.accel.compile import Compile, compiled_block_count  # noqa: E402
from newsmotion_engine.accel.fp8 import Float8Linear, Fp8Linears  # noqa: E402
from newsmotion_engine.accel.memory import ChunkedFeedForward, FfnChunks, VaeTiling  # noqa: E402
from newsmotion_engine.accel.teacache import TeaCache  # noqa: E402
from newsmotion_engine.bench.gpu import forward_inputs  # noqa: E402
from newsmotion_engine.render.backends.wan_animate.components import load_render_components  # noqa: E402
from newsmotion_engine.render.backends.wan_animate.config import WanAnimateOptions  # noqa: E402

OPTS = WanAnimateOptions(preset="tiny", device="cpu", dtype="float32")


@pytest.fixture(scope="module")
def comps():
    return load_render_components(OPTS)


def _forward(comps):
    inputs = forward_inputs(OPTS.preset_spec.transformer, 32, 32, 5, torch.device("cpu"), torch.float32)
    with torch.no_grad(), comps.transformer.cache_context("cond"):
        return comps.transformer(**inputs)[0]


def test_builtin_order_is_explicit():
    from newsmotion_engine.accel.sparse import SparseAttention

    builtin = [Fp8Linears, FfnChunks, Attention, SparseAttention, TeaCache, CFGSchedule, VaeTiling, Compile]
    assert [c for c in R.registered_accelerations() if c in builtin] == builtin


def test_apply_in_registry_order_then_remove_back_to_stock(comps):
    ref = _forward(comps)
    configs = [Compile(), VaeTiling(tile=64, stride=48), CFGSchedule(every=2), TeaCache(threshold=0.0),
               FfnChunks(chunks=2), Fp8Linears(mode="storage", keep_original=True)]  # fmt: skip
    assert all(R.is_reversible(c) for c in configs)
    applied = R.apply_accelerations(comps, configs)
    assert [c.technique for c in applied.configs] == ["fp8", "ffn_chunks", "teacache", "cfg", "vae_tiling", "compile"]
    report = applied.report
    assert list(report) == ["fp8", "ffn_chunks", "teacache", "cfg", "vae_tiling", "compile"]
    json.dumps(report)  # JSON-able, for telemetry
    assert report["fp8"]["layers"] > 0 and report["ffn_chunks"]["blocks"] == 2 and report["compile"]["blocks"] == 2
    tr = comps.transformer
    assert any(isinstance(m, Float8Linear) for m in tr.modules()) and isinstance(tr.blocks[0].ffn, ChunkedFeedForward)
    assert comps.cfg_schedule == CFGSchedule(every=2) and comps.vae.use_tiling and compiled_block_count(tr) == 2
    R.remove_accelerations(comps, applied)
    assert not any(isinstance(m, (Float8Linear, ChunkedFeedForward)) for m in tr.modules())
    assert comps.cfg_schedule is None and not comps.vae.use_tiling and compiled_block_count(tr) == 0
    assert getattr(tr, "_diffusers_hook", None) is None or tr._diffusers_hook.get_hook("newsmotion_teacache") is None
    assert torch.equal(_forward(comps), ref)  # the stock model, bit for bit


def test_irreversible_fp8_is_declared_and_refused_before_touching_anything():
    comps = load_render_components(OPTS)
    lossy = Fp8Linears(mode="storage")
    assert not R.is_reversible(lossy) and R.is_reversible(Fp8Linears(mode="storage", keep_original=True))
    applied = R.apply_accelerations(comps, [FfnChunks(chunks=2), lossy])
    assert not applied.reversible
    with pytest.raises(R.IrreversibleAccelerationError, match="keep_original=True"):
        R.remove_accelerations(comps, applied)
    assert isinstance(comps.transformer.blocks[0].ffn, ChunkedFeedForward)  # nothing was undone


def test_a_failed_apply_rolls_back_what_was_applied(comps):
    if torch.cuda.is_available():
        pytest.skip("the FP8 attention kernel may run here")
    with pytest.raises(AttentionUnavailableError):
        R.apply_accelerations(comps, [Attention("fp8-triton"), FfnChunks(chunks=2)])
    assert not isinstance(comps.transformer.blocks[0].ffn, ChunkedFeedForward)


def test_duplicates_unknown_configs_and_order_clashes(monkeypatch):
    with pytest.raises(R.AccelConfigError, match="two TeaCache configs"):
        R.ordered([TeaCache(), TeaCache(threshold=0.2)])

    @dataclass(frozen=True)
    class Unregistered(R.AccelConfig):
        technique: ClassVar[str] = "nope"

    with pytest.raises(R.UnknownAccelerationError, match="not a registered acceleration"):
        R.is_reversible(Unregistered())
    monkeypatch.setattr(R, "_HANDLERS", dict(R._HANDLERS))
    with pytest.raises(ValueError, match="order 40 is taken by TeaCache"):
        R.register_acceleration(Unregistered, order=40, apply=lambda c, cfg: R.AccelHandle(), remove=lambda c, h: None)
    with pytest.raises(ValueError, match="needs a remove function"):
        R.register_acceleration(Unregistered, order=999, apply=lambda c, cfg: R.AccelHandle())
    R.register_acceleration(Unregistered, order=999, apply=lambda c, cfg: R.AccelHandle({"ok": True}), reversible=False)
    applied = R.apply_accelerations(types.SimpleNamespace(), [Unregistered()])
    assert applied.report == {"nope": {"ok": True}} and not R.is_reversible(Unregistered())
