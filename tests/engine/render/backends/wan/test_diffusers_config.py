"""Defaults of the two diffusers backends' options (render/diffusers_config.py and each backend's
config): with only a ``model_path`` every unset option is the released model's, read from fake
model folders laid out like the releases (render/backends/wan/released/: the configs, no weights); without one
the preset's; explicit options win. Also the scheduler class from the folder, the float32 VAE,
the official prompts and the README's resource example."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from newsmotion_engine.errors import BadInputError
from newsmotion_engine.render.backends.wan.released import released_dir
from newsmotion_engine.render.backends.wan_animate.config import WanAnimateOptions
from newsmotion_engine.render.backends.wan_animate_2.config import WanAnimate2ConfigError, WanAnimate2Options

# Wan2.2's wan/configs/shared_config.py sample_neg_prompt and wan_animate_14B.py prompt, as published.
OFFICIAL_NEGATIVE = (
    "色调艳丽，过曝，静态，细节模糊不清，字幕，风格，作品，画作，画面，静止，整体发灰，最差质量，低质量，JPEG压缩残留，"
    "丑陋的，残缺的，多余的手指，画得不好的手部，画得不好的脸部，畸形的，毁容的，形态畸形的肢体，手指融合，"
    "静止不动的画面，杂乱的背景，三条腿，背景人很多，倒着走"
)
OFFICIAL_ANIMATE_PROMPT = "视频中的人在做动作"


def _folder(tmp_path: Path, backend: str, name: str = "model") -> Path:
    """A model folder with the release's config files (no weights: the options only read configs)."""
    root = tmp_path / name
    shutil.copytree(released_dir(backend), root)
    return root


def _write(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


# ---------------------------------------------------------------- wan-animate


def test_wan_animate_model_path_alone_takes_the_released_defaults(tmp_path):
    folder = _folder(tmp_path, "wan-animate")
    o = WanAnimateOptions.from_mapping({"model_path": str(folder)})
    assert (o.segment_length, o.steps, o.guidance_scale, o.prev_frames) == (77, 20, 1.0, 1)
    assert (o.negative_prompt, o.default_prompt) == (OFFICIAL_NEGATIVE, OFFICIAL_ANIMATE_PROMPT)
    d = o.model_defaults()
    assert d["source"] == f"model folder {folder}"
    assert (d["segment_frames"], d["steps"], d["guidance_scale"], d["model_fps"]) == (77, 20, 1.0, 30)
    assert (d["scheduler"], d["shift"]) == ("UniPCMultistepScheduler", 5.0)
    # The preset is ignored with a folder; without one its 9-frame segments apply.
    assert WanAnimateOptions.from_mapping({"model_path": str(folder), "preset": "smoke"}).segment_length == 77
    tiny = WanAnimateOptions.from_mapping({})
    assert tiny.segment_length == 9 and tiny.model_defaults()["source"] == "preset 'tiny' (random weights)"


def test_wan_animate_explicit_options_override_the_folder(tmp_path):
    folder = _folder(tmp_path, "wan-animate")
    o = WanAnimateOptions.from_mapping({"model_path": str(folder), "segment_frames": 41, "steps": 4, "guidance_scale": 2.5,
                                        "negative_prompt": "", "prompt": "a presenter"})  # fmt: skip
    assert (o.segment_length, o.steps, o.guidance_scale, o.negative_prompt, o.prompt) == (41, 4, 2.5, "", "a presenter")


def test_wan_animate_scheduler_class_and_config_come_from_the_folder(tmp_path):
    pytest.importorskip("diffusers")
    from diffusers import FlowMatchEulerDiscreteScheduler, UniPCMultistepScheduler

    from newsmotion_engine.render.backends.wan.components import RenderComponents, scheduler_config

    folder = _folder(tmp_path, "wan-animate")
    o = WanAnimateOptions(model_path=str(folder))

    def new(config):
        return RenderComponents(None, None, config, {}, "cpu", None, None).new_scheduler()

    released = new(scheduler_config(o))
    assert type(released) is UniPCMultistepScheduler and released.config.flow_shift == 5.0
    _write(folder / "scheduler" / "scheduler_config.json", {"_class_name": "FlowMatchEulerDiscreteScheduler", "shift": 3.0})
    euler = new(scheduler_config(o))
    assert type(euler) is FlowMatchEulerDiscreteScheduler and euler.config.shift == 3.0
    assert o.model_defaults()["scheduler"] == "FlowMatchEulerDiscreteScheduler" and o.model_defaults()["shift"] == 3.0
    _write(folder / "scheduler" / "scheduler_config.json", {"_class_name": "NoSuchScheduler"})
    with pytest.raises(BadInputError, match=r"scheduler_config.json: names scheduler 'NoSuchScheduler'"):
        scheduler_config(o)
    (folder / "scheduler" / "scheduler_config.json").write_text("{not json")
    with pytest.raises(BadInputError, match="scheduler_config.json: is not readable JSON"):
        scheduler_config(o)
    assert o.model_defaults()["scheduler"].startswith("unreadable:")  # describe() reports it, loading raises
    # No folder: the preset's UniPC config.
    preset = new(scheduler_config(WanAnimateOptions()))
    assert type(preset) is UniPCMultistepScheduler and preset.config.flow_shift == 5.0


def test_wan_animate_prompts_default_to_wans():
    from newsmotion_engine.guidance.catalogue import canonical_loops
    from newsmotion_engine.render.backends.wan.prompts import loop_prompt

    class Loop:
        loop_id = "nod"

    class Custom:
        loop_id = "my_custom_loop"

    assert WanAnimateOptions().negative_prompt == OFFICIAL_NEGATIVE
    assert loop_prompt(Loop(), None) == OFFICIAL_ANIMATE_PROMPT
    assert loop_prompt(Loop(), "loop") == canonical_loops()["nod"].prompt
    assert loop_prompt(Custom(), "loop") == OFFICIAL_ANIMATE_PROMPT
    assert loop_prompt(Loop(), "a presenter waves") == "a presenter waves"


def test_readme_resource_example_parses():
    readme = (Path(__file__).parents[5] / "README.md").read_text()
    found = re.search(r'RendererResource\(backend="wan-animate", options=(\{[^}]*\})', readme)
    assert found, "the README's wan-animate resource example is gone"
    options = json.loads(found.group(1))
    o = WanAnimateOptions.from_mapping(options)
    assert o.model_path == options["model_path"] and o.has("fp8") and o.has("compile")
    assert o.segment_length == 77  # the folder's default, not the tiny preset's 9


# ---------------------------------------------------------------- wan-animate-2


def test_wan_animate_2_schedule_guider_and_frames_come_from_the_folder(tmp_path):
    base = _folder(tmp_path, "wan-animate-2", "base")  # modular_model_index.json: WanAnimate2ModularPipeline
    o = WanAnimate2Options.from_mapping({"model_path": str(base)})
    assert (o.schedule, o.num_steps, o.cfg_scale, o.segment_length) == ("base", 40, 3.0, 81)
    d = o.model_defaults()
    assert d["schedule_from"] == "modular_model_index.json _class_name WanAnimate2ModularPipeline"
    assert (d["scheduler"], d["shift"], d["model_fps"], d["negative_prompt"]) == ("FlowMatchEulerDiscreteScheduler", 5.0, 24, "")
    assert "caption" in d["prompt"] and d["prompt_ref"] == "人物动作的参考视频"
    WanAnimate2Options.from_mapping({"model_path": str(base), "cfg_every": 2})  # CFG options apply: the folder is base

    distilled = _folder(tmp_path, "wan-animate-2", "distilled")
    index = json.loads((distilled / "modular_model_index.json").read_text())
    _write(distilled / "modular_model_index.json", {**index, "_class_name": "WanAnimate2DistilledModularPipeline"})
    od = WanAnimate2Options(model_path=str(distilled))
    assert (od.schedule, od.num_steps, od.cfg_scale, od.segment_length) == ("distilled", 10, 1.0, 81)
    with pytest.raises(WanAnimate2ConfigError, match="distilled schedule samples without CFG"):
        WanAnimate2Options(model_path=str(distilled), guidance_scale=3.0)

    # A guider config in the folder sets the guidance; explicit options still win.
    _write(base / "guider" / "guider_config.json", {"_class_name": "ClassifierFreeGuidance", "guidance_scale": 4.5})
    assert WanAnimate2Options(model_path=str(base)).cfg_scale == 4.5
    assert WanAnimate2Options(model_path=str(base)).model_defaults()["guidance_from"] == "guider/guider_config.json"
    explicit = WanAnimate2Options(model_path=str(base), schedule="distilled", steps=6, segment_frames=41)
    assert (explicit.schedule, explicit.num_steps, explicit.cfg_scale, explicit.segment_length) == ("distilled", 6, 4.5, 41)
    assert WanAnimate2Options(model_path=str(base), guidance_scale=2.0).cfg_scale == 2.0
    _write(base / "guider" / "guider_config.json", {"guidance_scale": "strong"})
    with pytest.raises(BadInputError, match=r"guider_config.json: guidance_scale 'strong'"):
        WanAnimate2Options(model_path=str(base)).cfg_scale  # noqa: B018

    # Without a folder: the preset's defaults as before (distilled, 9-frame tiny segments).
    p = WanAnimate2Options()
    assert (p.schedule, p.num_steps, p.cfg_scale, p.segment_length) == ("distilled", 10, 1.0, 9)
    assert p.model_defaults()["schedule_from"] == "preset"


def test_wan_animate_2_scheduler_must_take_a_generator(tmp_path):
    pytest.importorskip("diffusers")
    from diffusers import FlowMatchEulerDiscreteScheduler

    from newsmotion_engine.render.backends.wan_animate_2.components import RenderComponents, scheduler_config

    folder = _folder(tmp_path, "wan-animate-2")
    o = WanAnimate2Options(model_path=str(folder))
    config = scheduler_config(o)
    sched = RenderComponents(None, None, config, {}, "cpu", None, None).new_scheduler()
    assert type(sched) is FlowMatchEulerDiscreteScheduler and sched.config.shift == 5.0
    # The scheduler file the release first shipped (UniPC) cannot step with the pipeline's generator.
    shutil.copy(released_dir("wan-animate") / "scheduler" / "scheduler_config.json", folder / "scheduler" / "scheduler_config.json")
    with pytest.raises(BadInputError, match=r"scheduler_config.json: names UniPCMultistepScheduler, whose step\(\) takes no generator"):
        scheduler_config(o)


# ---------------------------------------------------------------- both


@pytest.mark.parametrize("backend", ["wan-animate", "wan-animate-2"])
def test_vae_is_float32_on_every_device(backend, monkeypatch):
    """The VAE is built in float32 whatever the device (the old rule gave a GPU bf16): the load is
    run on the meta device, which is not the CPU, and the cache identity says float32."""
    torch = pytest.importorskip("torch")
    from newsmotion_engine.render.backends.wan import components as wan
    from newsmotion_engine.render.backends.wan_animate.components import load_render_components as load_wan

    monkeypatch.setattr(wan, "resolve_device", lambda name: torch.device("meta"))
    if backend == "wan-animate":
        comps = load_wan(WanAnimateOptions(dtype="bfloat16"))
    else:
        from newsmotion_engine.render.backends.wan_animate_2.components import load_render_components

        comps = load_render_components(WanAnimate2Options(dtype="bfloat16"))
    assert comps.vae_dtype == torch.float32 and {p.dtype for p in comps.vae.parameters()} == {torch.float32}
    assert comps.identity["vae_dtype"] == "float32"
    assert comps.dtype == torch.bfloat16 and torch.bfloat16 in {p.dtype for p in comps.transformer.parameters()}


@pytest.mark.parametrize("backend", ["wan-animate", "wan-animate-2"])
def test_describe_shows_the_resolved_defaults_and_their_source(backend, tmp_path):
    pytest.importorskip("diffusers")
    from newsmotion_engine.render import get_backend

    folder = _folder(tmp_path, backend)
    info = get_backend(backend, model_path=str(folder)).describe()
    assert info["defaults"]["source"] == f"model folder {folder}" and info["preset"] is None
    assert info["defaults"]["segment_frames"] == (77 if backend == "wan-animate" else 81)
    assert info["segment_frames"] == info["defaults"]["segment_frames"]
    if backend == "wan-animate-2":
        assert (info["schedule"], info["steps"], info["guidance_scale"]) == ("base", 40, 3.0)
        assert "persona caption" in info["prompt"]
