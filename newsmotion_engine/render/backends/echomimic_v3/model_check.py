"""EchoMimicV3's folder layout for ``newsmotion model check DIR``
(:mod:`newsmotion_engine.render.model_check`): the layout :mod:`.components` loads — the release's
transformer (``transformer/diffusion_pytorch_model.safetensors``, official key names, an optional
original-layout ``config.json``) beside the Wan 2.1 i2v components in diffusers format. A
transformer whose header holds the audio modules marks the folder as this backend's; a Wan 2.1
i2v diffusers folder (its index names ``WanImageToVideoPipeline``) is taken as one still missing
the transformer. The transformer is checked against the model the loader builds (the folder's
config over the released sizes, on the meta device) through the key map, from the header only."""

from __future__ import annotations

from pathlib import Path

from newsmotion_engine.errors import BadInputError
from newsmotion_engine.render.backends.echomimic_v3.components import TRANSFORMER_WEIGHTS, check_model_folder, folder_transformer_kwargs
from newsmotion_engine.render.backends.echomimic_v3.config import NAME, EchoMimicV3Options, released
from newsmotion_engine.render.backends.wan.diffusers_config import folder_pipeline_class, read_json
from newsmotion_engine.render.backends.wan.model_check import COMPONENT_SIZES, scheduler_text
from newsmotion_engine.render.model_check import (INDEXED, MARKED, NOT_MINE, ModelCheck, ModelLayout, component_row, compare_config,
                                                 config_text, fit_problem, meta_shapes, register_layout, tensor_index, weights_text)  # fmt: skip

__all__ = ["check_folder", "register"]

RELEASE = "antgroup/echomimic_v3 flash-pro"
WAN21_I2V_PIPELINE = "WanImageToVideoPipeline"  # the diffusers folder of the Wan 2.1 i2v components
_AUDIO_PREFIX = "audio_injection."
_SHOWN = ("num_layers", "num_attention_heads", "attention_head_dim", "ffn_dim", "in_channels", "audio_layers", "audio_channels",
          "audio_context_tokens")  # fmt: skip


def _claims(root: Path) -> int:
    weights = root / "transformer" / TRANSFORMER_WEIGHTS
    try:
        if weights.is_file() and any(name.startswith(_AUDIO_PREFIX) for name in tensor_index(weights)):
            return MARKED
    except BadInputError:
        pass  # not this layout's transformer; another layout may claim the folder
    found = folder_pipeline_class(root)
    return INDEXED if found is not None and found[0] == WAN21_I2V_PIPELINE else NOT_MINE


def check_folder(root: Path) -> ModelCheck:
    """The folder as EchoMimicV3's; :class:`BadInputError` naming the first missing file, or the
    transformer when it does not fit the model the loader builds."""
    from newsmotion_engine.render.backends.echomimic_v3.keymap import official_to_ours
    from newsmotion_engine.render.backends.echomimic_v3.model import EchoMimicV3Transformer3DModel

    check_model_folder(root)
    opts = EchoMimicV3Options.from_mapping({"model_path": str(root)})
    kwargs = folder_transformer_kwargs(opts)
    weights = root / "transformer" / TRANSFORMER_WEIGHTS
    index = tensor_index(weights)
    if problem := fit_problem(index, meta_shapes(lambda: EchoMimicV3Transformer3DModel(**kwargs)), to_ours=official_to_ours):
        raise BadInputError(weights, f"does not fit the EchoMimicV3 transformer of {_config_source(root)}: {problem}")
    rows = [("transformer", "EchoMimicV3 (official names)", config_text(kwargs, _SHOWN), weights_text([weights], [index]))]
    rows += [row for name in ("vae", "image_encoder", "text_encoder", "tokenizer", "scheduler", "wav2vec2")
             if (row := component_row(root, name, COMPONENT_SIZES.get(name, ()))) is not None]  # fmt: skip
    config = root / "transformer" / "config.json"
    if config.is_file():
        release = compare_config("transformer", read_json(config), released()["official_transformer"], RELEASE)
    else:
        release = f"transformer: no config.json in the folder, the released sizes are used ({RELEASE})"
    defaults = {"segment frames": opts.segment_length, "steps": opts.num_steps, "audio CFG": opts.guidance, "scheduler": scheduler_text(opts)}
    return ModelCheck(root, NAME, "EchoMimicV3 transformer + Wan 2.1 i2v components", rows, release, defaults,
                      options=f"--backend {NAME} -o model_path={root} -o speech=ID")  # fmt: skip


def _config_source(root: Path) -> str:
    config = root / "transformer" / "config.json"
    return "transformer/config.json" if config.is_file() else "the released sizes"


def register() -> None:
    """Add EchoMimicV3's layout to ``newsmotion model check`` (idempotent)."""
    register_layout(NAME, ModelLayout(expects=f"transformer/{TRANSFORMER_WEIGHTS} with the audio modules + Wan 2.1 i2v vae/, "
                                               "image_encoder/, text_encoder/, tokenizer/, scheduler/",
                                      claims=_claims, check=check_folder))  # fmt: skip
