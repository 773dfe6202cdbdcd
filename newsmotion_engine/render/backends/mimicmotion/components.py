"""Loading MimicMotion's components: from an SVD-xt-1.1 diffusers folder plus the MimicMotion
checkpoint, or a preset's architecture with seeded random weights.

As the official loader (``mimicmotion/utils/loader.py``): the UNet is built from the folder's
``unet/config.json`` (the SVD UNet weights are not used) and the UNet and the PoseNet are loaded
from the checkpoint; the VAE (``AutoencoderKLTemporalDecoder``), the image encoder
(``CLIPVisionModelWithProjection``), the scheduler (``EulerDiscreteScheduler``) and the feature
extractor come from the folder (fp16-variant weight files are found too).

The checkpoint (``MimicMotion_1-1.pth``, a ``torch.save`` of the official ``MimicMotionModel``'s
state dict, or a ``.safetensors`` with the same keys) maps onto our modules by prefix
(:data:`CHECKPOINT_PREFIXES`): ``unet.<key>`` is the diffusers UNet's ``<key>`` (the official UNet
is diffusers' class with one added line, so the names agree), ``pose_net.<key>`` is
:class:`~.pose_net.PoseNet`'s. Both must be complete (strict). Keys under other prefixes are
ignored and logged (the official ``strict=False`` load would also load them).

The image encoder runs only while building the persona sub-cache; a render holds the UNet, the
PoseNet and the VAE.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from newsmotion_engine.cachedir import sha256_json
from newsmotion_engine.errors import BadInputError
from newsmotion_engine.render.backends.mimicmotion.config import NAME, MimicMotionOptions, released_component
from newsmotion_engine.render.backends.wan import components as wan
from newsmotion_engine.render.backends.wan.diffusers_config import RANDOM_WEIGHTS_LABEL, read_json

__all__ = ["CHECKPOINT_PREFIXES", "MimicMotionComponents", "PIPELINE_CLASSES", "check_model_folder", "load_image_encoder",
           "load_render_components", "read_checkpoint", "split_checkpoint"]  # fmt: skip

log = logging.getLogger(__name__)

PIPELINE_CLASSES = ("StableVideoDiffusionPipeline",)
CHECKPOINT_PREFIXES = {"unet.": "unet", "pose_net.": "pose_net"}
# Sub-folder -> files that must be there. The UNet's weights come from the MimicMotion checkpoint.
_REQUIRED = {
    ".": ("model_index.json",),
    "unet": ("config.json",),
    "vae": ("config.json",),
    "image_encoder": ("config.json",),
    "scheduler": ("scheduler_config.json",),
}
_WEIGHTED = ("vae", "image_encoder")
_WEIGHT_SUFFIXES = (".safetensors", ".bin")
# The UNet's repeated blocks, for regional compilation (diffusers' compile_repeated_blocks).
REPEATED_BLOCKS = ["TransformerSpatioTemporalModel", "SpatioTemporalResBlock"]


def check_model_folder(path: Path, checkpoint: Path | None = None) -> None:
    """Raise :class:`BadInputError` naming the first missing file, a wrong pipeline class or a
    missing checkpoint (``checkpoint``: default ``{path}/MimicMotion_1-1.pth``)."""
    if not path.is_dir():
        raise BadInputError(path, "model folder does not exist (set model_path or NEWSMOTION_MODEL_DIR_MIMICMOTION, or use a preset)")
    for sub, names in _REQUIRED.items():
        for name in names:
            if not (path / sub / name).is_file():
                raise BadInputError(path / sub / name, "missing from the SVD-xt-1.1 model folder (incomplete download?)")
    for sub in _WEIGHTED:
        if not any(p.name.endswith(_WEIGHT_SUFFIXES) for p in (path / sub).iterdir()):
            raise BadInputError(path / sub, "has no weight file (*.safetensors); the download is incomplete")
    index = path / "model_index.json"
    cls = read_json(index).get("_class_name")
    if cls not in PIPELINE_CLASSES:
        raise BadInputError(index, f"is a {cls!r} model, not {' / '.join(PIPELINE_CLASSES)} (wrong architecture for {NAME})")
    ckpt = checkpoint or path / "MimicMotion_1-1.pth"
    if not ckpt.is_file():
        raise BadInputError(ckpt, "MimicMotion checkpoint not found: download MimicMotion_1-1.pth into the folder or set -o checkpoint=PATH")


def read_checkpoint(path: Path) -> dict[str, dict[str, Any]]:
    """The checkpoint's tensors split by module (:data:`CHECKPOINT_PREFIXES`): ``{"unet": {...},
    "pose_net": {...}}``. Raises :class:`BadInputError` naming the file when it cannot be read or
    holds no UNet or no PoseNet."""
    from newsmotion_engine.render.model_check import torch_state_dict

    if path.suffix != ".safetensors":
        return split_checkpoint(torch_state_dict(path), path)
    from safetensors.torch import load_file

    try:
        state = load_file(str(path))
    except Exception as exc:  # any reader failure is the file's problem: one message naming it
        raise BadInputError(path, f"is not a readable checkpoint ({type(exc).__name__}: {exc})") from None
    return split_checkpoint(state, path)


def split_checkpoint(state: Mapping[str, Any], path: Path) -> dict[str, dict[str, Any]]:
    """A checkpoint's entries (tensors, or anything keyed by tensor name) split by module
    (:data:`CHECKPOINT_PREFIXES`), prefixes dropped. Raises :class:`BadInputError` naming ``path``
    when it holds no UNet or no PoseNet."""
    parts: dict[str, dict[str, Any]] = {module: {} for module in CHECKPOINT_PREFIXES.values()}
    ignored = set()
    for key, value in state.items():
        prefix = next((p for p in CHECKPOINT_PREFIXES if key.startswith(p)), None)
        if prefix is None:
            ignored.add(key.split(".", 1)[0])
            continue
        parts[CHECKPOINT_PREFIXES[prefix]][key[len(prefix) :]] = value
    for module, tensors in parts.items():
        if not tensors:
            raise BadInputError(path, f"has no {module}.* tensors: not a MimicMotion checkpoint")
    if ignored:
        log.info("%s: ignored checkpoint tensors under %s", path.name, ", ".join(sorted(ignored)))
    return parts


def _cast(tensors: dict[str, Any], dtype: Any) -> dict[str, Any]:
    return {k: v.to(dtype) if v.is_floating_point() else v for k, v in tensors.items()}


def _load_strict(module: Any, tensors: dict[str, Any], path: Path, what: str) -> None:
    try:
        module.load_state_dict(tensors, strict=True, assign=True)
    except RuntimeError as exc:
        first = str(exc).strip().splitlines()
        raise BadInputError(path, f"does not fit the {what} ({first[1].strip() if len(first) > 1 else first[0]})") from None


@dataclass
class MimicMotionComponents(wan.RenderComponents):
    """What a render uses: the UNet (as ``transformer``, where the acceleration registry looks),
    the VAE, the scheduler config and the PoseNet."""

    pose_net: Any = None
    default_scheduler = "EulerDiscreteScheduler"

    @property
    def unet(self) -> Any:
        return self.transformer


def model_identity(opts: MimicMotionOptions, device: Any) -> dict[str, Any]:
    """What the sub-caches are keyed on: for a folder the component configs, the weight files'
    names and sizes and the checkpoint's; for a preset its name, the seed and the init device."""
    if opts.model_path:
        root = Path(opts.model_path)
        configs, files = {}, {}
        for sub in ("unet", *_WEIGHTED, "scheduler"):
            for p in sorted((root / sub).iterdir()):
                if p.suffix == ".json":
                    configs[f"{sub}/{p.name}"] = read_json(p)
                elif p.name.endswith(_WEIGHT_SUFFIXES):
                    files[f"{sub}/{p.name}"] = p.stat().st_size
        ckpt = opts.checkpoint_path()
        ident: dict[str, Any] = {"weights": "folder", "path": str(root.resolve()), "configs": sha256_json(configs), "files": files,
                                 "checkpoint": [ckpt.name, ckpt.stat().st_size]}  # fmt: skip
    else:
        ident = {"weights": RANDOM_WEIGHTS_LABEL, "model": NAME, "preset": opts.preset, "seed": wan.RANDOM_SEED,
                 "init_device": getattr(device, "type", str(device))}  # fmt: skip
    return {**ident, "digest": sha256_json(ident)[:16]}


def _variant(folder: Path) -> str | None:
    """``"fp16"`` when the folder holds only fp16-variant weight files (as SVD ships them)."""
    names = [p.name for p in folder.iterdir() if p.name.endswith(_WEIGHT_SUFFIXES)]
    return "fp16" if names and all(".fp16." in n for n in names) else None


def build_unet_and_pose_net(opts: MimicMotionOptions, device: Any, dtype: Any) -> tuple[Any, Any]:
    """The UNet and the PoseNet: from the folder's UNet config and the checkpoint, or the preset
    with seeded random weights (the PoseNet's projection then random too, so it does something)."""
    from diffusers import UNetSpatioTemporalConditionModel

    from newsmotion_engine.render.backends.mimicmotion import attention  # noqa: F401  registers its fp8-triton processor
    from newsmotion_engine.render.backends.mimicmotion.pose_net import PoseNet

    if opts.model_path:
        import torch

        root = Path(opts.model_path)
        config = UNetSpatioTemporalConditionModel.load_config(root / "unet")
        # Built without memory (meta), then the checkpoint's tensors are assigned (strict): as the
        # official loader, the folder's UNet weights are not read.
        with torch.device("meta"):
            unet = UNetSpatioTemporalConditionModel.from_config(config)
            pose_net = PoseNet(noise_latent_channels=unet.config.block_out_channels[0])
        ckpt = opts.checkpoint_path()
        parts = read_checkpoint(ckpt)
        _load_strict(unet, _cast(parts["unet"], dtype), ckpt, "UNet of the folder's unet/config.json")
        _load_strict(pose_net, _cast(parts["pose_net"], dtype), ckpt, "PoseNet")
        unet, pose_net = unet.to(device), pose_net.to(device)
    else:
        import torch

        with wan._seeded(wan.RANDOM_SEED, device), wan._default_dtype(dtype), device:
            unet = UNetSpatioTemporalConditionModel(**opts.preset_spec.unet)
            pose_net = PoseNet(noise_latent_channels=unet.config.block_out_channels[0])
            torch.nn.init.normal_(pose_net.final_proj.weight, std=0.02)  # zero-init would hide the pose path
        # The device context does not reach legacy constructors: AlphaBlender's mix_factor is
        # made by torch.Tensor([...]) and stays on the CPU unless moved.
        unet, pose_net = unet.to(device), pose_net.to(device)
    unet._repeated_blocks = list(REPEATED_BLOCKS)
    unet = unet.eval().requires_grad_(False)
    pose_net = pose_net.eval().requires_grad_(False)
    return unet, pose_net


def build_vae(opts: MimicMotionOptions, device: Any, dtype: Any):
    from diffusers import AutoencoderKLTemporalDecoder

    if opts.model_path:
        folder = Path(opts.model_path) / "vae"
        vae = AutoencoderKLTemporalDecoder.from_pretrained(folder, torch_dtype=dtype, variant=_variant(folder))
        return vae.to(device).eval().requires_grad_(False)
    with wan._seeded(wan.RANDOM_SEED + 1, device), wan._default_dtype(dtype), device:
        vae = AutoencoderKLTemporalDecoder(**opts.preset_spec.vae)
    return vae.to(device).eval().requires_grad_(False)


def load_image_encoder(opts: MimicMotionOptions, device: Any):
    """``(feature_extractor, CLIPVisionModelWithProjection)`` in float32; for cache building only."""
    import torch
    from transformers import CLIPImageProcessor, CLIPVisionConfig, CLIPVisionModelWithProjection

    root = Path(opts.model_path) if opts.model_path else None
    if root is not None and (root / "feature_extractor" / "preprocessor_config.json").is_file():
        proc = CLIPImageProcessor.from_pretrained(root / "feature_extractor")
    else:
        proc = CLIPImageProcessor(**{k: v for k, v in released_component("feature_extractor/preprocessor_config.json").items()
                                     if k != "image_processor_type"})  # fmt: skip
    if root is not None:
        folder = root / "image_encoder"
        enc = CLIPVisionModelWithProjection.from_pretrained(folder, torch_dtype=torch.float32, variant=_variant(folder))
        return proc, enc.to(device).eval()
    with wan._seeded(wan.RANDOM_SEED + 2, device), device:
        enc = CLIPVisionModelWithProjection(CLIPVisionConfig(**opts.preset_spec.image_encoder))
    return proc, enc.to(device).eval().requires_grad_(False)


def load_render_components(opts: MimicMotionOptions) -> MimicMotionComponents:
    """UNet + PoseNet + VAE + scheduler config on the configured device (no image encoder); the
    folder and checkpoint checked first. The VAE runs float32 on the CPU, the compute dtype on a GPU."""
    import torch

    if opts.model_path:
        check_model_folder(Path(opts.model_path), opts.checkpoint_path())
    elif opts.checkpoint:
        raise BadInputError(opts.checkpoint, "a MimicMotion checkpoint needs the SVD-xt-1.1 folder beside it: set model_path too")
    scheduler = opts.scheduler_config()
    where = Path(opts.model_path) / "scheduler" / "scheduler_config.json" if opts.model_path else f"preset {opts.preset!r}"
    wan.scheduler_class(scheduler, "EulerDiscreteScheduler", where)
    device = wan.resolve_device(opts.device)
    dtype = wan.torch_dtype(opts.dtype)
    vae_dtype = dtype if device.type == "cuda" else torch.float32
    ident = model_identity(opts, device)
    unet, pose_net = build_unet_and_pose_net(opts, device, dtype)
    vae = build_vae(opts, device, vae_dtype)
    return MimicMotionComponents(unet, vae, scheduler, ident, device, dtype, vae_dtype, pose_net=pose_net)
