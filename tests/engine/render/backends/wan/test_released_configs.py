"""The released checkpoints' configs (render/backends/wan/released/): each component instantiated on the meta
device the way ``from_pretrained`` reads its config, its parameter count pinned, and the ``14b``
presets shown to build exactly these architectures (same state-dict keys and shapes)."""

from __future__ import annotations

import pytest
import torch

from newsmotion_engine.render.backends.wan.released import RELEASES, component_kwargs, released_config
from newsmotion_engine.render.backends.wan_animate.config import PRESETS as WAN_ANIMATE
from newsmotion_engine.render.backends.wan_animate_2.config import PRESETS as WAN_ANIMATE_2

# Parameter counts of the released architectures (the transformer's 17.3B is the figure the
# 14B model card family quotes for Wan2.2-Animate; the others are the Wan 2.1 VAE, CLIP ViT-H/14's
# vision tower and the UMT5-XXL encoder).
PARAMS = {
    ("wan-animate", "transformer"): 17_274_816_884,
    ("wan-animate-2", "transformer"): 16_394_878_784,
    ("wan-animate", "vae"): 126_892_531,
    ("wan-animate-2", "vae"): 126_892_531,
    ("wan-animate", "image_encoder"): 630_766_080,
    ("wan-animate-2", "image_encoder"): 630_766_080,
    ("wan-animate", "text_encoder"): 5_680_910_336,
    ("wan-animate-2", "text_encoder"): 5_680_910_336,
}
PRESETS = {"wan-animate": WAN_ANIMATE["14b"], "wan-animate-2": WAN_ANIMATE_2["14b"]}


def build(component: str, kwargs: dict, class_name: str | None = None):
    import diffusers
    from transformers import CLIPVisionConfig, CLIPVisionModel, UMT5Config, UMT5EncoderModel

    with torch.device("meta"):
        if component == "image_encoder":
            return CLIPVisionModel(CLIPVisionConfig(**kwargs))
        if component == "text_encoder":
            return UMT5EncoderModel(UMT5Config(**kwargs))
        cls = getattr(diffusers, class_name)
        return cls.from_config(kwargs)


def shapes(model) -> dict[str, tuple[int, ...]]:
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}


@pytest.mark.parametrize(("backend", "component"), sorted(PARAMS))
def test_released_component_on_meta_matches_preset(backend, component):
    preset = PRESETS[backend]
    if component in ("transformer", "vae"):
        config = released_config(backend, f"{component}/config.json")
        cls = config["_class_name"]
        import diffusers

        init, unused, _ = getattr(diffusers, cls).extract_init_dict(config)
        assert not {k for k in unused if not k.startswith("_")}, f"keys {cls} does not take: {unused}"
        released = build(component, config, cls)
        from_preset = build(component, getattr(preset, component), cls)
    else:
        released = build(component, component_kwargs(backend, component))
        from_preset = build(component, getattr(preset, component))
    assert all(p.is_meta for p in released.parameters())
    assert sum(p.numel() for p in released.parameters()) == PARAMS[(backend, component)]
    assert shapes(released) == shapes(from_preset)


def test_pipeline_indexes_name_the_classes_our_loaders_accept():
    from newsmotion_engine.render.backends.wan_animate import components as wan
    from newsmotion_engine.render.backends.wan_animate_2 import components as wan2

    index = released_config("wan-animate", "model_index.json")
    assert index["_class_name"] in wan.PIPELINE_CLASSES and index["transformer"] == ["diffusers", wan.TRANSFORMER_CLASS]
    assert index["scheduler"][1] == released_config("wan-animate", "scheduler/scheduler_config.json")["_class_name"]
    index2 = released_config("wan-animate-2", "modular_model_index.json")
    assert index2["_class_name"] in wan2.PIPELINE_CLASSES and index2["transformer"] == ["diffusers", wan2.TRANSFORMER_CLASS]
    assert index2["scheduler"][1] == released_config("wan-animate-2", "scheduler/scheduler_config.json")["_class_name"]


def test_schedulers_build_from_the_released_configs():
    import diffusers

    for backend in RELEASES:
        config = released_config(backend, "scheduler/scheduler_config.json")
        scheduler = getattr(diffusers, config["_class_name"]).from_config(config)
        shift = scheduler.config.get("flow_shift", scheduler.config.get("shift"))
        assert shift == 5.0
