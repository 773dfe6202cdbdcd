"""Champ's official folder layout for ``newsmotion model check DIR``
(:mod:`newsmotion_engine.render.model_check`): the ``pretrained_models/`` folder the official
``configs/inference/inference.yaml`` names and :mod:`.components` loads (``released/champ.json``'s
``layout``: ``stable-diffusion-v1-5/unet/config.json``, ``sd-vae-ft-mse/``, ``image_encoder/``,
``champ/`` with the seven weight files). Every weight file is checked, from its index only
(:func:`~newsmotion_engine.render.model_check.tensor_index`), against the models the folder's
configs build on the meta device, in the loader's order and precedence (SD1.5's UNet weights
under the Champ files, the temporal modules through the key map). The render also needs the
user's own SMPL file, which no folder holds: the options say so."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from newsmotion_engine.errors import BadInputError
from newsmotion_engine.render.backends.champ.components import (WEIGHT_SUFFIXES, build_models, component_file, folder_preset,
                                                                 official_to_diffusers)  # fmt: skip
from newsmotion_engine.render.backends.champ.config import NAME, SMPL_ENV, released
from newsmotion_engine.render.backends.wan.diffusers_config import read_json
from newsmotion_engine.render.model_check import (MARKED, NOT_MINE, ModelCheck, ModelLayout, Row, compare_config, component_row,
                                                 config_text, fit_problem, register_layout, require_files, tensor_index,
                                                 weights_text)  # fmt: skip

__all__ = ["check_folder", "register"]

RELEASE = "fudan-generative-vision/champ (SD1.5 UNet)"
_WHAT = "the Champ folder (pretrained_models/ as configs/inference/inference.yaml names it)"


def _claims(root: Path) -> int:
    return MARKED if (root / released()["layout"]["champ"]).is_dir() else NOT_MINE


def _weight_files(root: Path) -> dict[str, Path]:
    """Each released ``champ/`` weight file by stem; :class:`BadInputError` naming the missing ones."""
    folder = root / released()["layout"]["champ"]
    found = {stem: next((folder / f"{stem}{x}" for x in WEIGHT_SUFFIXES if (folder / f"{stem}{x}").is_file()), None)
             for stem in released()["layout"]["weights"]}  # fmt: skip
    require_files(folder, [f"{stem}.pth" for stem, path in found.items() if path is None], _WHAT)
    return {stem: path for stem, path in found.items() if path is not None}


def _meta_models(root: Path) -> dict[str, dict[str, tuple[int, ...]]]:
    """Name -> shape of each model the folder's configs build, per model (guidance encoders per type)."""
    import torch

    with torch.device("meta"):
        models = build_models(folder_preset(root))
    shapes = {name: {k: tuple(v.shape) for k, v in m.state_dict().items()} for name, m in models.items() if name != "guidance_encoders"}
    for kind, encoder in models["guidance_encoders"].items():
        shapes[f"guidance_encoder_{kind}"] = {k: tuple(v.shape) for k, v in encoder.state_dict().items()}
    return shapes


def _fit(path: Path, index: dict[str, Any], expected: dict[str, tuple[int, ...]], what: str, optional: tuple[str, ...] = ()) -> None:
    if problem := fit_problem(index, expected, optional=optional):
        raise BadInputError(path, f"does not fit the {what} of the folder's configs: {problem}")


def check_folder(root: Path) -> ModelCheck:
    """The folder as Champ's; :class:`BadInputError` naming the missing files, or the first weight
    file that does not fit its model."""
    lay = released()["layout"]
    require_files(root, [lay["unet_config"], f"{lay['vae']}/config.json", f"{lay['image_encoder']}/config.json"], _WHAT)
    files = _weight_files(root)
    components = {name: component_file(root / lay[name], stems)
                  for name, stems in (("vae", ("diffusion_pytorch_model",)), ("image_encoder", ("model", "pytorch_model")))}  # fmt: skip
    for name, path in components.items():
        if path is None:
            raise BadInputError(root / lay[name], "has no weight file (*.safetensors / *.bin); the download is incomplete")
    shapes = _meta_models(root)
    indexes = {stem: tensor_index(path) for stem, path in files.items()}
    base_file = component_file((root / lay["unet_config"]).parent, ("diffusion_pytorch_model",))
    base = tensor_index(base_file) if base_file else {}  # SD1.5's UNet weights: both UNets start from them
    _fit(files["denoising_unet"], official_to_diffusers({**base, **indexes["motion_module"], **indexes["denoising_unet"]}),
         shapes["denoising_unet"], "denoising UNet (SD1.5 + motion modules)", optional=(".pos_embed.pe",))  # fmt: skip
    _fit(files["reference_unet"], {**base, **indexes["reference_unet"]}, shapes["reference_unet"], "reference UNet")
    for stem in (s for s in files if s.startswith("guidance_encoder_")):
        _fit(files[stem], indexes[stem], shapes[stem], f"guidance encoder ({stem.removeprefix('guidance_encoder_')})")
    for name, path in components.items():
        _fit(path, tensor_index(path), shapes[name], name.replace("_", " "), optional=("position_ids",))
    unet = read_json(root / lay["unet_config"])
    widths = {stem: [shape[0] for key, (shape, _) in indexes[stem].items() if key in ("conv_in.weight", "conv_out.weight")]
              for stem in files if stem.startswith("guidance_encoder_")}  # fmt: skip
    rows: list[Row] = [
        (lay["unet_config"], str(unet.get("_class_name", "UNet2DConditionModel")),
         config_text(unet, ("block_out_channels", "cross_attention_dim", "attention_head_dim")), weights_text([base_file]) if base_file else ""),
        *((f"{lay['champ']}/{path.name}", _CLASSES.get(stem, "GuidanceEncoder"),
           f"in / out channels {widths[stem]}" if stem in widths else "", weights_text([path], [indexes[stem]])) for stem, path in files.items()),
        component_row(root, lay["vae"], ("block_out_channels", "latent_channels", "scaling_factor"), weights="any"),
        component_row(root, lay["image_encoder"], ("hidden_size", "num_hidden_layers", "projection_dim"), weights="any"),
    ]  # fmt: skip
    sampling = released()["sampling"]
    defaults = {"context frames": f"{sampling['context_frames']} (overlap {sampling['context_overlap']})",
                "steps": sampling["num_inference_steps"], "CFG": sampling["guidance_scale"],
                "scheduler": "DDIMScheduler (v-prediction, zero-SNR, trailing)", "official size": f"{sampling['width']}x{sampling['height']}"}  # fmt: skip
    return ModelCheck(root, NAME, "Champ, official layout", [r for r in rows if r is not None],
                      compare_config("unet", unet, released()["unet"], RELEASE), defaults,
                      options=f"--backend {NAME} -o model_path={root} -o smpl_model=SMPL.pkl (required: your own licensed "
                              f"SMPL model file, or ${SMPL_ENV})")  # fmt: skip


_CLASSES = {"denoising_unet": "UNet3DConditionModel (2D part)", "motion_module": "AnimateDiff v2 motion modules",
            "reference_unet": "UNet2DConditionModel"}  # fmt: skip


def register() -> None:
    """Add Champ's layout to ``newsmotion model check`` (idempotent)."""
    register_layout(NAME, ModelLayout(expects="champ/ (denoising_unet, reference_unet, motion_module, guidance_encoder_*), "
                                               "stable-diffusion-v1-5/unet/config.json, sd-vae-ft-mse/, image_encoder/",
                                      claims=_claims, check=check_folder))  # fmt: skip
