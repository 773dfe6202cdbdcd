"""Building Champ's models from diffusers / transformers components, and loading the official
checkpoint folder.

The models (as the official ``inference.py`` wires them):

- denoising UNet: the official ``UNet3DConditionModel`` is SD1.5's UNet with AnimateDiff-v2
  temporal modules after every resnet/attention pair and in the mid block. Its layout maps onto
  diffusers' ``UNetMotionModel`` exactly (same 2D parameter names; per-frame group norms, which is
  what ``use_inflated_groupnorm`` means; motion modules in the same places and order); only the
  temporal modules' names differ (:func:`motion_key`).
- reference UNet: SD1.5's ``UNet2DConditionModel`` (the official file is a copy of diffusers').
- four :class:`~.modules.GuidanceEncoder` (depth, normal, semantic_map, dwpose).
- VAE ``AutoencoderKL`` (sd-vae-ft-mse), image encoder ``CLIPVisionModelWithProjection``.

The official folder (``pretrained_models/``, as ``configs/inference/inference.yaml`` names it)::

    stable-diffusion-v1-5/unet/config.json     the UNets' architecture (weights come from champ/)
    sd-vae-ft-mse/                             config.json + diffusion_pytorch_model.{safetensors,bin}
    image_encoder/                             config.json + model.safetensors / pytorch_model.bin
    champ/denoising_unet.pth                   the denoising UNet's 2D weights
    champ/motion_module.pth                    its temporal modules
    champ/reference_unet.pth
    champ/guidance_encoder_{depth,normal,semantic_map,dwpose}.pth

Each ``champ/`` file may also be ``.safetensors``. ``.pth`` files are read with
``torch.load(weights_only=True)`` (tensors only, no code).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from newsmotion_engine.cachedir import sha256_json
from newsmotion_engine.errors import BadInputError
from newsmotion_engine.render.backends.champ.config import ChampOptions, Preset, released
from newsmotion_engine.render.backends.wan.components import resolve_device, torch_dtype
from newsmotion_engine.render.backends.wan.diffusers_config import RANDOM_WEIGHTS_LABEL, read_json

__all__ = [
    "ChampComponents",
    "build_models",
    "component_file",
    "folder_preset",
    "load_components",
    "load_state_dict_file",
    "motion_key",
    "official_to_diffusers",
    "weights_file",
]

RANDOM_SEED = 0
WEIGHT_SUFFIXES = (".safetensors", ".pth", ".pt", ".bin")


@dataclass
class ChampComponents:
    """What a render uses. ``transformer`` is the denoising UNet (the name the acceleration
    registry applies configs to)."""

    transformer: Any
    reference_unet: Any
    guidance_encoders: Any  # nn.ModuleDict: guidance type -> GuidanceEncoder
    vae: Any
    image_encoder: Any
    scheduler_config: dict[str, Any]
    identity: dict[str, Any]
    device: Any
    dtype: Any
    reference: Any = None  # modules.ReferenceState: the attention bank, shared by the two UNets' processors

    @property
    def weights_label(self) -> str:
        return RANDOM_WEIGHTS_LABEL if self.identity["weights"] == RANDOM_WEIGHTS_LABEL else f"folder {self.identity['path']}"

    def new_scheduler(self):
        """A fresh DDIM scheduler (its state must never leak between renders)."""
        from diffusers import DDIMScheduler

        return DDIMScheduler.from_config({k: v for k, v in self.scheduler_config.items() if not k.startswith("_")})


# ----------------------------------------------------------------------------- architecture
def _unet_kwargs(unet: Mapping[str, Any]) -> dict[str, Any]:
    keep = ("act_fn", "block_out_channels", "cross_attention_dim", "down_block_types", "downsample_padding",
            "flip_sin_to_cos", "freq_shift", "in_channels", "layers_per_block", "mid_block_scale_factor", "norm_eps",
            "norm_num_groups", "out_channels", "sample_size", "up_block_types", "attention_head_dim", "center_input_sample")  # fmt: skip
    return {k: (tuple(v) if isinstance(v, list) else v) for k, v in unet.items() if k in keep}


def _motion_block(name: str) -> str:
    return name.replace("CrossAttnDownBlock2D", "CrossAttnDownBlockMotion").replace("DownBlock2D", "DownBlockMotion") \
        .replace("CrossAttnUpBlock2D", "CrossAttnUpBlockMotion").replace("UpBlock2D", "UpBlockMotion")  # fmt: skip


def build_models(preset: Preset) -> dict[str, Any]:
    """The five models of ``preset`` with freshly initialised weights, on the current device and
    default dtype (use inside ``accelerate.init_empty_weights()`` / a meta device for shapes only)."""
    from diffusers import AutoencoderKL, UNet2DConditionModel, UNetMotionModel
    from torch import nn
    from transformers import CLIPVisionConfig, CLIPVisionModelWithProjection

    from newsmotion_engine.render.backends.champ.modules import GuidanceEncoder

    unet = _unet_kwargs(preset.unet)
    mm = preset.motion_module
    if list(mm.get("motion_module_resolutions", [1, 2, 4, 8]))[: len(unet["block_out_channels"])] != [2**i for i in range(len(unet["block_out_channels"]))]:
        raise BadInputError("motion_module", "Champ's motion modules sit at every resolution; another layout is not supported")
    motion = UNetMotionModel(
        sample_size=unet.get("sample_size"), in_channels=unet.get("in_channels", 4), out_channels=unet.get("out_channels", 4),
        down_block_types=tuple(_motion_block(b) for b in unet["down_block_types"]),
        up_block_types=tuple(_motion_block(b) for b in unet["up_block_types"]),
        block_out_channels=unet["block_out_channels"], layers_per_block=unet["layers_per_block"],
        downsample_padding=unet.get("downsample_padding", 1), mid_block_scale_factor=unet.get("mid_block_scale_factor", 1),
        act_fn=unet.get("act_fn", "silu"), norm_num_groups=unet["norm_num_groups"], norm_eps=unet.get("norm_eps", 1e-5),
        cross_attention_dim=unet["cross_attention_dim"],
        num_attention_heads=unet["attention_head_dim"],  # SD1.5's "attention_head_dim" is its head count (diffusers' naming)
        motion_num_attention_heads=mm["num_attention_heads"], motion_max_seq_length=mm["temporal_position_encoding_max_len"],
        use_motion_mid_block=bool(mm["motion_module_mid_block"]),
        temporal_transformer_layers_per_block=mm.get("num_transformer_block", 1),
    )  # fmt: skip
    reference = UNet2DConditionModel(**unet)
    g = preset.guidance_encoder
    encoders = nn.ModuleDict({
        t: GuidanceEncoder(g["guidance_embedding_channels"], g["guidance_input_channels"], tuple(g["block_out_channels"]),
                           g["attention_num_heads"], g.get("norm_num_groups", 32))
        for t in g["guidance_types"]
    })  # fmt: skip
    vae_kw = {k: (tuple(v) if isinstance(v, list) else v) for k, v in preset.vae.items() if k not in ("scaling_factor",)}
    vae = AutoencoderKL(**vae_kw, scaling_factor=preset.vae.get("scaling_factor", 0.18215))
    clip_kw = {k: v for k, v in preset.image_encoder.items() if not k.startswith("_")}
    image_encoder = CLIPVisionModelWithProjection(CLIPVisionConfig(**clip_kw))
    return {"denoising_unet": motion, "reference_unet": reference, "guidance_encoders": encoders, "vae": vae,
            "image_encoder": image_encoder}  # fmt: skip


# ----------------------------------------------------------------------------- official checkpoint
_MOTION_RENAMES = ((".temporal_transformer.", "."), (".attention_blocks.0.", ".attn1."), (".attention_blocks.1.", ".attn2."),
                   (".norms.0.", ".norm1."), (".norms.1.", ".norm2."), (".ff_norm.", ".norm3."))  # fmt: skip


def motion_key(key: str) -> str | None:
    """An official (AnimateDiff) temporal-module key -> diffusers' ``UNetMotionModel`` key; None for
    the second attention's positional table (diffusers keeps one per block: the same sinusoid)."""
    if ".motion_modules." not in key:
        return key
    if re.search(r"\.attention_blocks\.1\.pos_encoder\.pe$", key):
        return None
    key = re.sub(r"\.attention_blocks\.0\.pos_encoder\.pe$", ".pos_embed.pe", key)
    for old, new in _MOTION_RENAMES:
        key = key.replace(old, new)
    return key


def official_to_diffusers(state: Mapping[str, Any]) -> dict[str, Any]:
    """The denoising UNet's official keys (``denoising_unet.pth`` + ``motion_module.pth``, optionally
    under a ``module.`` prefix) -> ``UNetMotionModel``'s."""
    out = {}
    for k, v in state.items():
        k = k[len("module."):] if k.startswith("module.") else k
        new = motion_key(k)
        if new is not None:
            out[new] = v
    return out


def load_state_dict_file(path: Path) -> dict[str, Any]:
    """Tensors of a ``.safetensors`` / ``.pth`` file; :class:`BadInputError` naming it when unreadable."""
    import torch

    try:
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file

            state = load_file(str(path))
        else:
            state = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as exc:  # any reader failure is the file's problem; name it
        raise BadInputError(path, f"is not a readable weights file ({type(exc).__name__}: {exc})") from None
    if isinstance(state, Mapping) and "state_dict" in state and isinstance(state["state_dict"], Mapping):
        state = state["state_dict"]
    if not isinstance(state, Mapping):
        raise BadInputError(path, "holds no state dict")
    return dict(state)


def weights_file(folder: Path, stem: str) -> Path:
    """``folder/{stem}`` with the first of :data:`WEIGHT_SUFFIXES` present; :class:`BadInputError` when none is."""
    for suffix in WEIGHT_SUFFIXES:
        if (folder / f"{stem}{suffix}").is_file():
            return folder / f"{stem}{suffix}"
    raise BadInputError(folder / f"{stem}.pth", "missing from the Champ model folder (champ/ holds the released weights)")


def _load_into(module: Any, state: Mapping[str, Any], path: Path, *, optional: tuple[str, ...] = ()) -> None:
    """Load strictly; keys matching ``optional`` (regexes) may be missing (deterministic buffers)."""
    import torch

    own = module.state_dict()
    missing = [k for k in own if k not in state and not any(re.search(p, k) for p in optional)]
    unexpected = [k for k in state if k not in own]
    if missing or unexpected:
        detail = "; ".join(filter(None, [f"missing {', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''} ({len(missing)})" if missing else "",
                                         f"unexpected {', '.join(unexpected[:3])}{' ...' if len(unexpected) > 3 else ''} ({len(unexpected)})" if unexpected else ""]))  # fmt: skip
        raise BadInputError(path, f"does not match the Champ architecture: {detail}")
    bad = [k for k, v in state.items() if tuple(v.shape) != tuple(own[k].shape)]
    if bad:
        raise BadInputError(path, f"{bad[0]} has shape {list(state[bad[0]].shape)}, the model's is {list(own[bad[0]].shape)}")
    with torch.no_grad():
        module.load_state_dict(dict(state), strict=False)  # strictness checked above, optional buffers kept


def folder_preset(root: Path) -> Preset:
    """The architecture of an official folder: its UNet, VAE and CLIP configs, the released motion
    module config (the official code hard-codes it) and the guidance encoders' widths as their
    checkpoint has them (the official code hard-codes the released ones; reading them lets a
    smaller folder of the same layout load)."""
    r = released()
    lay = r["layout"]
    unet = read_json(root / lay["unet_config"])
    vae = read_json(root / lay["vae"] / "config.json")
    clip = read_json(root / lay["image_encoder"] / "config.json")
    clip = clip.get("vision_config", clip) if "vision_config" in clip else clip
    keep_clip = ("hidden_size", "intermediate_size", "num_attention_heads", "num_hidden_layers", "patch_size", "image_size",
                 "projection_dim", "hidden_act", "layer_norm_eps")  # fmt: skip
    vae_keys = ("act_fn", "block_out_channels", "down_block_types", "in_channels", "latent_channels", "layers_per_block",
                "norm_num_groups", "out_channels", "sample_size", "up_block_types", "scaling_factor")  # fmt: skip
    strip = lambda d: {k: v for k, v in d.items() if not k.startswith("_") and k != "comment"}  # noqa: E731
    guidance = strip(r["guidance_encoder"])
    first = weights_file(root / lay["champ"], f"guidance_encoder_{guidance['guidance_types'][0]}")
    state = load_state_dict_file(first)
    try:
        widths = [int(state["conv_in.weight"].shape[0])] + [int(state[f"blocks.{i}.weight"].shape[0]) for i in (1, 3, 5)]
        guidance.update(block_out_channels=widths, guidance_embedding_channels=int(state["conv_out.weight"].shape[0]))
    except KeyError as exc:
        raise BadInputError(first, f"is not a Champ guidance encoder (no {exc.args[0]})") from None
    return Preset("folder", unet, strip(r["motion_module"]), guidance,
                  {k: v for k, v in vae.items() if k in vae_keys}, {k: v for k, v in clip.items() if k in keep_clip})  # fmt: skip


def component_file(folder: Path, stems: tuple[str, ...]) -> Path | None:
    """A diffusers / transformers component's weights file (safetensors first), or None."""
    return next((folder / f"{s}{x}" for s in stems for x in (".safetensors", ".bin") if (folder / f"{s}{x}").is_file()), None)


def load_folder_weights(models: Mapping[str, Any], root: Path) -> None:
    """Load the official folder's weights into ``models`` (from :func:`build_models`), in the
    official order and precedence (``inference.py``): each UNet starts from SD1.5's weights when
    the folder has them (``stable-diffusion-v1-5/unet/``), the denoiser's temporal modules from
    ``motion_module``, then ``denoising_unet`` / ``reference_unet`` on top (the official loads
    them last, ``strict=False``). The result must cover every parameter: a key no file provides
    is an error naming the Champ file."""
    lay = released()["layout"]
    champ = root / lay["champ"]
    base_file = component_file((root / lay["unet_config"]).parent, ("diffusion_pytorch_model",))
    base = load_state_dict_file(base_file) if base_file else {}
    den_path, mm_path = weights_file(champ, "denoising_unet"), weights_file(champ, "motion_module")
    state = official_to_diffusers({**base, **load_state_dict_file(mm_path), **load_state_dict_file(den_path)})
    _load_into(models["denoising_unet"], state, den_path, optional=(r"\.pos_embed\.pe$",))
    ref_path = weights_file(champ, "reference_unet")
    _load_into(models["reference_unet"], {**base, **load_state_dict_file(ref_path)}, ref_path)
    for t, enc in models["guidance_encoders"].items():
        p = weights_file(champ, f"guidance_encoder_{t}")
        _load_into(enc, load_state_dict_file(p), p)
    for name, sub, stems in (("vae", lay["vae"], ("diffusion_pytorch_model",)), ("image_encoder", lay["image_encoder"], ("model", "pytorch_model"))):
        path = component_file(root / sub, stems)
        if path is None:
            raise BadInputError(root / sub / f"{stems[0]}.safetensors", "missing from the Champ model folder")
        _load_into(models[name], load_state_dict_file(path), path, optional=(r"position_ids$",))


def model_identity(opts: ChampOptions, device: Any) -> dict[str, Any]:
    """What the persona sub-cache is keyed on (JSON-able, with a ``digest``)."""
    if opts.model_path:
        root = Path(opts.model_path)
        files = {str(p.relative_to(root)): p.stat().st_size for p in sorted(root.rglob("*")) if p.is_file() and p.suffix in (*WEIGHT_SUFFIXES, ".json")}
        ident: dict[str, Any] = {"weights": "folder", "path": str(root.resolve()), "files": files}
    else:
        ident = {"weights": RANDOM_WEIGHTS_LABEL, "model": "champ", "preset": opts.preset, "seed": RANDOM_SEED,
                 "init_device": getattr(device, "type", str(device))}  # fmt: skip
    return {**ident, "digest": sha256_json(ident)[:16]}


def load_components(opts: ChampOptions) -> ChampComponents:
    """The models for ``opts``: the folder's weights, or the preset's architecture with seeded
    random weights; on the resolved device, UNets and encoders in ``opts.dtype``, the VAE in fp32.

    Raises:
        BadInputError: a missing or mismatching file of the model folder (named).
    """
    import torch

    device = resolve_device(opts.device)
    dtype = torch_dtype(opts.dtype)
    if opts.model_path:
        root = Path(opts.model_path)
        if not root.is_dir():
            raise BadInputError(root, "is not a folder (give the official pretrained_models/ folder)")
        preset = folder_preset(root)
    else:
        preset = opts.preset_spec
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(RANDOM_SEED)
        models = build_models(preset)
    if opts.model_path:
        load_folder_weights(models, Path(opts.model_path))
    for name, m in models.items():
        m.eval().requires_grad_(False)
        # nn.Module.to: diffusers' own .to() warns about fp32-kept modules these models do not have.
        torch.nn.Module.to(m, device=device, dtype=torch.float32 if name == "vae" else dtype)
    from newsmotion_engine.render.backends.champ import attention  # noqa: F401  registers its fp8-triton processor
    from newsmotion_engine.render.backends.champ.modules import ReferenceState, install_reference_attention

    reference = ReferenceState()
    install_reference_attention(models["reference_unet"], models["denoising_unet"], reference)
    return ChampComponents(
        reference=reference, transformer=models["denoising_unet"], reference_unet=models["reference_unet"],
        guidance_encoders=models["guidance_encoders"], vae=models["vae"], image_encoder=models["image_encoder"],
        scheduler_config=opts.scheduler_config(), identity=model_identity(opts, device), device=device, dtype=dtype,
    )  # fmt: skip
