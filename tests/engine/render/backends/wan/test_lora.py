"""LoRAs: the option's syntax, Wan-native files fused into the tiny presets exactly
(scale * up @ down * alpha / rank), one clear error per bad file, FP8 quantizing the fused
weights, the few-steps warning."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import save_file

from newsmotion_engine.errors import BadInputError
from newsmotion_engine.render.backends.wan.lora import LoraSpec, few_steps_warning, parse_lora_option
from newsmotion_engine.render.backends.wan_animate.components import load_render_components as load_wan
from newsmotion_engine.render.backends.wan_animate.config import WanAnimateConfigError, WanAnimateOptions
from newsmotion_engine.render.backends.wan_animate_2.components import load_render_components as load_wan2
from newsmotion_engine.render.backends.wan_animate_2.config import WanAnimate2Options

# Wan-native module -> (wan-animate's diffusers name, wan-animate-2's diffusers name)
TARGETS = {
    "blocks.0.self_attn.q": ("blocks.0.attn1.to_q", "blocks.0.self_attn.to_q"),
    "blocks.1.cross_attn.o": ("blocks.1.attn2.to_out.0", "blocks.1.cross_attn.to_out.0"),
    "blocks.1.ffn.0": ("blocks.1.ffn.net.0.proj", "blocks.1.ffn.0"),
}
RANK, ALPHA = 2, 4.0


def native_lora(path, transformer, which: int, *, seed=0):
    """A random LoRA in the released Wan-native layout (lightx2v: ``diffusion_model.`` prefix,
    ``lora_down`` / ``lora_up`` / ``alpha``) for this transformer; returns the expected per-module
    delta at scale 1 (up @ down * alpha / rank)."""
    g = torch.Generator().manual_seed(seed)
    modules = dict(transformer.named_modules())
    state, expected = {}, {}
    for native, names in TARGETS.items():
        lin = modules[names[which]]
        down = torch.randn(RANK, lin.in_features, generator=g)
        up = torch.randn(lin.out_features, RANK, generator=g)
        state[f"diffusion_model.{native}.lora_down.weight"] = down
        state[f"diffusion_model.{native}.lora_up.weight"] = up
        state[f"diffusion_model.{native}.alpha"] = torch.tensor(ALPHA)
        expected[names[which] + ".weight"] = up @ down * (ALPHA / RANK)
    save_file(state, str(path))
    return expected


def weights(transformer):
    return {k: v.detach().clone() for k, v in transformer.state_dict().items()}


@pytest.mark.parametrize("backend", ["wan-animate", "wan-animate-2"])
def test_native_lora_fused_exactly_and_unloaded(tmp_path, backend):
    cls, load, which = (WanAnimateOptions, load_wan, 0) if backend == "wan-animate" else (WanAnimate2Options, load_wan2, 1)
    base = load(cls(preset="tiny", device="cpu", dtype="float32"))
    before = weights(base.transformer)
    expected = native_lora(tmp_path / "distill.safetensors", base.transformer, which)
    comps = load(cls.from_mapping({"preset": "tiny", "device": "cpu", "dtype": "float32",
                                   "lora": f"{tmp_path / 'distill.safetensors'}:0.5"}))  # fmt: skip
    after = weights(comps.transformer)
    assert set(after) == set(before)  # adapter unloaded: the same parameters, no lora_A/lora_B left
    for name, value in after.items():
        delta = 0.5 * expected[name] if name in expected else 0.0
        torch.testing.assert_close(value, before[name] + delta, rtol=1e-5, atol=1e-5)
    assert not any("lora" in type(m).__name__.lower() for m in comps.transformer.modules())
    assert comps.identity["loras"] == [{"file": "distill.safetensors", "bytes": (tmp_path / "distill.safetensors").stat().st_size, "scale": 0.5}]
    assert comps.identity["digest"] != base.identity["digest"]


def test_two_loras_add_up(tmp_path):
    base = load_wan(WanAnimateOptions(preset="tiny", device="cpu", dtype="float32"))
    before = weights(base.transformer)
    e1 = native_lora(tmp_path / "a.safetensors", base.transformer, 0, seed=1)
    e2 = native_lora(tmp_path / "b.safetensors", base.transformer, 0, seed=2)
    opts = WanAnimateOptions.from_mapping({"preset": "tiny", "device": "cpu", "dtype": "float32",
                                           "lora": [f"{tmp_path / 'a.safetensors'}", f"{tmp_path / 'b.safetensors'}:-2"]})  # fmt: skip
    after = weights(load_wan(opts).transformer)
    for name in e1:
        torch.testing.assert_close(after[name], before[name] + e1[name] - 2 * e2[name], rtol=1e-5, atol=1e-4)


def test_option_syntax():
    assert parse_lora_option("/m/a.safetensors:0.8, /m/b.safetensors;/m/c:d.safetensors") == (
        LoraSpec("/m/a.safetensors", 0.8), LoraSpec("/m/b.safetensors"), LoraSpec("/m/c:d.safetensors"))
    assert parse_lora_option(["/m/a.safetensors", {"path": "/m/b", "scale": 2}]) == (LoraSpec("/m/a.safetensors"), LoraSpec("/m/b", 2.0))
    assert parse_lora_option(None) == parse_lora_option("") == ()
    assert WanAnimateOptions(lora="/m/a.safetensors:0.5").lora == (LoraSpec("/m/a.safetensors", 0.5),)
    assert WanAnimate2Options.from_mapping({"lora": ["/m/a.safetensors"]}).lora == (LoraSpec("/m/a.safetensors"),)
    with pytest.raises(WanAnimateConfigError, match="lora"):
        WanAnimateOptions(lora=3)
    with pytest.raises(WanAnimateConfigError, match="lora"):
        WanAnimateOptions(lora="/m/a.safetensors:inf")


def test_bad_files_name_the_file(tmp_path):
    def load(path):
        return load_wan(WanAnimateOptions(preset="tiny", device="cpu", dtype="float32", lora=str(path)))

    with pytest.raises(BadInputError, match="missing.safetensors.*does not exist"):
        load(tmp_path / "missing.safetensors")
    junk = tmp_path / "junk.safetensors"
    junk.write_bytes(b"not a safetensors file")
    with pytest.raises(BadInputError, match="junk.safetensors.*not a readable safetensors"):
        load(junk)
    save_file({"blocks.0.weight": torch.zeros(2, 2)}, str(tmp_path / "plain.safetensors"))
    with pytest.raises(BadInputError, match="plain.safetensors.*no LoRA"):
        load(tmp_path / "plain.safetensors")
    # A LoRA for a wider model: the names match, the shapes do not.
    save_file({"diffusion_model.blocks.0.self_attn.q.lora_down.weight": torch.zeros(2, 5120),
               "diffusion_model.blocks.0.self_attn.q.lora_up.weight": torch.zeros(5120, 2)}, str(tmp_path / "big.safetensors"))  # fmt: skip
    with pytest.raises(BadInputError, match="big.safetensors"):
        load(tmp_path / "big.safetensors")
    # A module the tiny model does not have (block 7 of 2).
    save_file({"diffusion_model.blocks.7.self_attn.q.lora_down.weight": torch.zeros(2, 24),
               "diffusion_model.blocks.7.self_attn.q.lora_up.weight": torch.zeros(24, 2)}, str(tmp_path / "deep.safetensors"))  # fmt: skip
    with pytest.raises(BadInputError, match="deep.safetensors.*does not have: blocks.7"):
        load(tmp_path / "deep.safetensors")


def test_fp8_quantizes_the_fused_weights(tmp_path):
    """Through the backend's own order (components, then the registry's accelerations): the FP8
    linears hold the fused weights, not the base ones."""
    from newsmotion_engine.accel.fp8 import Float8Linear, Fp8Linears
    from newsmotion_engine.accel.registry import apply_accelerations

    base = load_wan(WanAnimateOptions(preset="tiny", device="cpu", dtype="float32"))
    before = weights(base.transformer)
    expected = native_lora(tmp_path / "l.safetensors", base.transformer, 0)
    opts = WanAnimateOptions(preset="tiny", device="cpu", dtype="float32", lora=str(tmp_path / "l.safetensors"),
                             accelerations=(Fp8Linears(mode="storage"),))  # fmt: skip
    comps = load_wan(opts)
    apply_accelerations(comps, opts.accelerations)
    modules = dict(comps.transformer.named_modules())
    for name, delta in expected.items():
        layer = modules[name.removesuffix(".weight")]
        assert isinstance(layer, Float8Linear)
        w = layer.dequantized_weight().float()
        fused = before[name] + delta
        assert (w - fused).norm() < 0.1 * (w - before[name]).norm()
        assert (w - fused).norm() / fused.norm() < 0.1  # e4m3: a few % error


def test_few_steps_warning():
    assert few_steps_warning(4, (), distilled=False) is not None and "lora" in few_steps_warning(4, (), distilled=False)
    assert few_steps_warning(4, (LoraSpec("/m/a"),), distilled=False) is None
    assert few_steps_warning(4, (), distilled=True) is None
    assert few_steps_warning(20, (), distilled=False) is None


def test_steps_warning_from_options_and_describe(tmp_path, caplog):
    import json
    import logging

    from newsmotion_engine.render.backends.wan.lora import steps_warning, warn_once
    from newsmotion_engine.render.backends.wan_animate.backend import WanAnimateBackend

    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "model_index.json").write_text(json.dumps({"_class_name": "WanAnimatePipeline"}))
    opts = WanAnimateOptions(model_path=str(folder), steps=4)
    assert "4 steps" in steps_warning(opts)
    assert steps_warning(WanAnimateOptions(model_path=str(folder), steps=4, lora="/m/a.safetensors")) is None
    assert steps_warning(WanAnimateOptions(preset="tiny", steps=2)) is None  # random weights: nothing to distil
    (folder / "model_index.json").write_text(json.dumps({"_class_name": "WanAnimate2DistilledModularPipeline"}))
    assert steps_warning(WanAnimate2Options(model_path=str(folder), steps=4)) is None
    (folder / "model_index.json").write_text(json.dumps({"_class_name": "WanAnimate2ModularPipeline"}))
    assert "4 steps" in steps_warning(WanAnimate2Options(model_path=str(folder), schedule="base", steps=4))
    assert "4 steps" in WanAnimateBackend(opts).describe()["warning"]
    with caplog.at_level(logging.WARNING):
        warn_once(logging.getLogger("t"), "once only")
        warn_once(logging.getLogger("t"), "once only")
    assert [r.message for r in caplog.records].count("once only") == 1
