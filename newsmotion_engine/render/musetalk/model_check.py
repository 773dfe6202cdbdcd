"""MuseTalk 1.5's official folder layout for ``newsmotion model check DIR``
(:mod:`newsmotion_engine.render.model_check`): the layout :mod:`.components` loads
(``musetalkV15/musetalk.json`` + ``unet.pth``, ``sd-vae/``, ``whisper/``), the UNet's state dict
checked against the architecture its config builds (on the meta device, no weights loaded), the
config against the release, and the options of ``newsmotion lips`` that use it."""

from __future__ import annotations

from pathlib import Path

from newsmotion_engine.render.model_check import (MARKED, NOT_MINE, ModelCheck, ModelLayout, component_row, compare_config, config_text,
                                                 fit_problem, meta_shapes, register_layout, tensor_index, weights_text)  # fmt: skip
from newsmotion_engine.render.musetalk.components import (UNET_CONFIG, UNET_WEIGHTS, VAE_DIR, WHISPER_DIR, MuseTalkModelError, build_unet,
                                                          check_model_folder)  # fmt: skip
from newsmotion_engine.render.musetalk.config import MuseTalkOptions, released

__all__ = ["NAME", "check_folder", "register"]

NAME = "musetalk"
RELEASE = "TMElyralab/MuseTalk (musetalkV15)"
_WEIGHT_SUFFIXES = (".safetensors", ".bin")


def _claims(root: Path) -> int:
    return MARKED if (root / Path(UNET_CONFIG).parent).is_dir() else NOT_MINE


def check_folder(root: Path) -> ModelCheck:
    """The folder as MuseTalk 1.5's; :class:`MuseTalkModelError` naming the first missing file,
    a component folder without weights, or a ``unet.pth`` that does not fit its config."""
    from newsmotion_engine.render.backends.wan.diffusers_config import read_json

    check_model_folder(root)
    for sub in (VAE_DIR, WHISPER_DIR):
        if not any(p.name.endswith(_WEIGHT_SUFFIXES) for p in (root / sub).iterdir()):
            raise MuseTalkModelError(root / sub, "has no weight file (*.safetensors / *.bin); the download is incomplete")
    config = read_json(root / UNET_CONFIG)
    weights = root / UNET_WEIGHTS
    index = tensor_index(weights)
    if problem := fit_problem(index, meta_shapes(lambda: build_unet(config))):
        raise MuseTalkModelError(weights, f"does not fit the UNet of {UNET_CONFIG}: {problem}")
    unet_keys = ("in_channels", "out_channels", "cross_attention_dim", "block_out_channels", "sample_size")
    rows = [
        (UNET_WEIGHTS, str(config.get("_class_name", "UNet2DConditionModel")), config_text(config, unet_keys), weights_text([weights], [index])),
        component_row(root, VAE_DIR, ("block_out_channels", "latent_channels", "scaling_factor")),
        component_row(root, WHISPER_DIR, ("d_model", "encoder_layers", "num_mel_bins"), weights="any"),
    ]  # fmt: skip
    opts, inference = MuseTalkOptions(), released()["inference"]
    defaults = {"face size": inference["face_size"], "batch size": opts.batch_size, "extra margin": opts.extra_margin,
                "dtype (GPU)": opts.dtype}  # fmt: skip
    return ModelCheck(root, NAME, "MuseTalk 1.5, official layout", [r for r in rows if r is not None],
                      compare_config("unet", config, released()["unet"], RELEASE), defaults,
                      options=f"newsmotion lips --persona P --loop L --speech ID -o model_path={root}")  # fmt: skip


def register() -> None:
    """Add MuseTalk's layout to ``newsmotion model check`` (idempotent)."""
    register_layout(NAME, ModelLayout(expects="musetalkV15/musetalk.json + unet.pth, sd-vae/, whisper/", claims=_claims, check=check_folder))
