"""Loading the Wan models' components, shared by both Wan backends: from a diffusers-format folder,
or a preset's architecture with seeded random weights.

Each backend's ``components`` module gives its classes, folder layout and scheduler; the rest is
here: the folder checks (:func:`check_folder_contents`), the model identity, the seeded builders
(transformer, VAE, CLIP, UMT5), and :func:`assemble_render_components`.

The VAE is float32 on every device, as Wan runs it (its encode and decode). The image encoder and
text encoder are needed only while building caches, so a render process never holds them.

Model identity (:func:`model_identity`) is what the backend caches are keyed on: for a folder the
component configs and weight-file names + sizes; for a preset its name, "random weights", the seed
and the device the weights were drawn on (random draws differ between CPU and CUDA generators).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from newsmotion_engine.cachedir import sha256_json
from newsmotion_engine.errors import BadInputError
from newsmotion_engine.render.base import BackendOptionError
from newsmotion_engine.render.backends.wan.diffusers_config import RANDOM_WEIGHTS_LABEL, read_json
from newsmotion_engine.render.backends.wan.lora import fuse_loras

__all__ = [
    "RenderComponents",
    "ByteTokenizer",
    "assemble_render_components",
    "build_image_encoder",
    "check_folder_contents",
    "load_text_encoder",
    "model_identity",
    "resolve_device",
    "scheduler_class",
    "torch_dtype",
]

RANDOM_SEED = 0
VAE_DTYPE = "float32"  # Wan encodes and decodes in float32 (wan/modules/vae2_1.py)
_WEIGHTED = ("transformer", "vae", "image_encoder", "text_encoder")
_WEIGHT_SUFFIXES = (".safetensors", ".bin")


def torch_dtype(name: str):
    import torch

    return {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}[name]


def resolve_device(name: str):
    """``"auto"`` -> cuda when available, else cpu; anything else as given (checked)."""
    import torch

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(name)
    except (RuntimeError, TypeError):
        raise BackendOptionError(f"option device={name!r}: not a torch device (use cpu, cuda, cuda:0)") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise BackendOptionError(f"option device={name!r}: this machine has no CUDA GPU; use device='cpu'")
    return dev


def check_folder_contents(path: Path, index: Path, *, required: Mapping[str, tuple[str, ...]], pipelines: tuple[str, ...],
                          transformer: str, model: str, backend: str) -> None:  # fmt: skip
    """The checks of a diffusers-format folder both Wan backends run, in order: the ``required``
    files (sub-folder -> names), a weight file in each weighted component, the pipeline class in
    ``index`` (one of ``pipelines``), the transformer's class. Raises :class:`BadInputError`
    naming the file and the problem (``model``: the folder's kind, ``backend``: who refuses it)."""
    for sub, names in required.items():
        for name in names:
            f = path / sub / name
            if not f.is_file():
                raise BadInputError(f, f"missing from the {model} model folder (incomplete download?)")
    for sub in _WEIGHTED:
        if not any(p.suffix in _WEIGHT_SUFFIXES for p in (path / sub).iterdir()):
            raise BadInputError(path / sub, "has no weight file (*.safetensors); the download is incomplete")
    cls = _read_json(index).get("_class_name")
    if cls not in pipelines:
        raise BadInputError(index, f"is a {cls!r} model, not {' / '.join(pipelines)} (wrong architecture for {backend})")
    tconfig = path / "transformer" / "config.json"
    tcls = _read_json(tconfig).get("_class_name")
    if tcls != transformer:
        raise BadInputError(tconfig, f"describes {tcls!r}, not {transformer} (wrong architecture for {backend})")


# The config files a diffusers-format Wan folder must hold (sub-folder -> names).
WAN_FOLDER_LAYOUT = {
    "transformer": ("config.json",),
    "vae": ("config.json",),
    "scheduler": ("scheduler_config.json",),
    "image_encoder": ("config.json",),
    "text_encoder": ("config.json",),
    "tokenizer": ("tokenizer_config.json",),
}


def check_wan_folder(path: Path, *, pipelines: tuple[str, ...], transformer: str, model: str, backend: str, env: str) -> None:
    """A Wan backend's model folder check: the folder exists (else: set ``model_path`` or ``env``),
    has a pipeline index naming one of ``pipelines``, then :func:`check_folder_contents` over
    :data:`WAN_FOLDER_LAYOUT`. Raises :class:`BadInputError` naming the first problem."""
    from newsmotion_engine.render.backends.wan.diffusers_config import pipeline_index

    if not path.is_dir():
        raise BadInputError(path, f"model folder does not exist (set model_path or {env}, or use a preset)")
    index = pipeline_index(path)
    if index is None:
        raise BadInputError(path / "model_index.json", f"missing from the {model} model folder (no model_index.json or "
                                                       f"modular_model_index.json naming {' / '.join(pipelines)})")  # fmt: skip
    check_folder_contents(path, index, required=WAN_FOLDER_LAYOUT, pipelines=pipelines, transformer=transformer, model=model,
                          backend=backend)  # fmt: skip


_read_json = read_json  # the folder's JSON configs, read and checked (BadInputError naming the file)


def scheduler_class(config: Mapping[str, Any], default: str, where: Path | str = "scheduler/scheduler_config.json") -> type:
    """The diffusers scheduler class ``config["_class_name"]`` names (``default`` when it names
    none); :class:`BadInputError` naming ``where`` when diffusers has no such scheduler."""
    import diffusers

    name = config.get("_class_name") or default
    cls = getattr(diffusers, str(name), None)
    if not isinstance(cls, type) or not issubclass(cls, diffusers.SchedulerMixin):
        raise BadInputError(where, f"names scheduler {name!r}, which diffusers {diffusers.__version__} does not have")
    return cls


def model_identity(opts: Any, device: Any, model: str | None = None, vae_dtype: str = VAE_DTYPE) -> dict[str, Any]:
    """What caches built with these weights are keyed on (JSON-able, with a ``digest``); ``model``
    names the architecture of a preset's random weights where it is not wan-animate's; ``vae_dtype``
    the dtype the backend's VAE runs in."""
    if opts.model_path:
        root = Path(opts.model_path)
        configs, files = {}, {}
        for sub in (*_WEIGHTED, "scheduler"):
            for p in sorted((root / sub).iterdir()):
                if p.suffix == ".json":
                    configs[f"{sub}/{p.name}"] = _read_json(p)
                elif p.suffix in _WEIGHT_SUFFIXES:
                    files[f"{sub}/{p.name}"] = p.stat().st_size
        ident: dict[str, Any] = {"weights": "folder", "path": str(root.resolve()), "configs": sha256_json(configs), "files": files}
    else:
        ident = {"weights": RANDOM_WEIGHTS_LABEL, **({"model": model} if model else {}), "preset": opts.preset,
                 "seed": RANDOM_SEED, "init_device": getattr(device, "type", str(device))}  # fmt: skip
    ident["vae_dtype"] = vae_dtype  # the cached latents were VAE-encoded in this dtype
    return {**ident, "digest": sha256_json(ident)[:16]}


@contextlib.contextmanager
def _seeded(seed: int, device: Any) -> Iterator[None]:
    import torch

    devices = [device] if getattr(device, "type", "cpu") == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        yield


@contextlib.contextmanager
def _default_dtype(dtype: Any) -> Iterator[None]:
    import torch

    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


def keep_fp32_modules(model: Any) -> None:
    """Cast the modules a diffusers model keeps in fp32 (``_keep_in_fp32_modules``), as
    ``from_pretrained`` does, after building it in a lower precision."""
    import torch

    keep = set(getattr(model, "_keep_in_fp32_modules", None) or ())
    for name, param in model.named_parameters():
        if keep & set(name.split(".")):
            param.data = param.data.to(torch.float32)


@dataclass
class RenderComponents:
    """What a render uses: transformer, VAE (decoder at render time), scheduler config; the
    object the acceleration registry applies configs to. ``cfg_schedule`` is set by the
    ``CFGSchedule`` acceleration (None: plain CFG)."""

    transformer: Any
    vae: Any
    scheduler_config: dict[str, Any]
    identity: dict[str, Any]
    device: Any
    dtype: Any
    vae_dtype: Any
    cfg_schedule: Any = None

    @property
    def weights_label(self) -> str:
        return RANDOM_WEIGHTS_LABEL if self.identity["weights"] == RANDOM_WEIGHTS_LABEL else f"folder {self.identity['path']}"

    default_scheduler = "UniPCMultistepScheduler"  # Wan's default solver; a backend's subclass may name its own

    def new_scheduler(self):
        """A fresh scheduler of the config's class (its multistep state must never leak between renders)."""
        return scheduler_class(self.scheduler_config, self.default_scheduler).from_config(self.scheduler_config)


def build_transformer(opts: Any, device: Any, dtype: Any, model_class: Any):
    """The transformer (the backend's diffusers ``model_class``): from the folder, or the preset
    with seeded random weights."""
    if opts.model_path:
        model = model_class.from_pretrained(Path(opts.model_path) / "transformer", torch_dtype=dtype)
        return model.to(device).eval().requires_grad_(False)
    with _seeded(RANDOM_SEED, device), _default_dtype(dtype), device:
        model = model_class(**opts.preset_spec.transformer)
    keep_fp32_modules(model)
    return model.eval().requires_grad_(False)


def build_vae(opts: Any, device: Any, dtype: Any):
    """The Wan VAE (both backends; ``dtype``: float32 as Wan runs it): from the folder, or the
    preset with seeded random weights."""
    from diffusers import AutoencoderKLWan

    if opts.model_path:
        return channels_last_convs(AutoencoderKLWan.from_pretrained(Path(opts.model_path) / "vae", torch_dtype=dtype).to(device).eval())
    with _seeded(RANDOM_SEED + 1, device), device:
        vae = AutoencoderKLWan(**opts.preset_spec.vae)
    return channels_last_convs(vae.to(dtype).eval().requires_grad_(False))


def channels_last_convs(module: Any, channels_last: bool | None = None) -> Any:
    """Conv weights channels-last (3-D and 2-D: the Wan VAE has both), or back to contiguous;
    cuDNN then runs NDHWC kernels and the activations follow. Default: on a CUDA device only —
    the H200 decodes an 81-frame 720x1280 segment in 3.77 s instead of 4.21 s, the pixels moved
    by bf16 rounding (mean 0.006, max 0.047 in [-1, 1], random weights;
    ``benchmarks/results/vae_decode_h200.json``); the CPU keeps torch's default layout."""
    from newsmotion_engine.accel.memory_format import set_conv_format

    if channels_last is None:
        channels_last = any(p.is_cuda for p in module.parameters())
    set_conv_format(module, channels_last)
    return module


def scheduler_config(opts: Any) -> dict[str, Any]:
    """The scheduler config (both backends): the folder's ``scheduler/scheduler_config.json``, else
    the preset's, its class checked (:class:`BadInputError` naming the file)."""
    config = opts.scheduler_config()
    where = Path(opts.model_path) / "scheduler" / "scheduler_config.json" if opts.model_path else f"preset {opts.preset!r}"
    scheduler_class(config, opts.default_scheduler, where)
    return config


def assemble_render_components(opts: Any, components: type, *, check_folder: Callable[[Path], None],
                               identity: Callable[[Any, Any], dict[str, Any]], scheduler_config: Callable[[Any], dict[str, Any]],
                               build: Callable[[Any, Any, Any], Any], vae_dtype: str = VAE_DTYPE) -> Any:  # fmt: skip
    """``components(transformer, vae, scheduler config, identity, device, dtype, vae dtype)`` on
    the configured device, the folder checked first (``check_folder``) when there is one; ``build``
    makes the transformer; ``vae_dtype`` is the VAE's (a name; ``identity`` must key on the same).
    Every Wan-based backend loads through this."""
    if opts.model_path:
        check_folder(Path(opts.model_path))
    scheduler = scheduler_config(opts)  # checked before the weights load
    device = resolve_device(opts.device)
    dtype = torch_dtype(opts.dtype)
    # float32 by default, as Wan runs it (bf16 moves the decoded pixels); the 14B VAE's weights are 0.47 GiB in fp32.
    ident = identity(opts, device)
    transformer = build(opts, device, dtype)
    # LoRAs fused here, before the registry applies any acceleration: FP8 quantizes the fused weights.
    ident = fuse_loras(transformer, getattr(opts, "lora", ()), ident)
    vae = build_vae(opts, device, torch_dtype(vae_dtype))
    return components(transformer, vae, scheduler, ident, device, dtype, torch_dtype(vae_dtype))


def build_image_encoder(opts: Any, device: Any):
    """The CLIP vision model (both backends): from the folder, or the preset with seeded random weights."""
    import torch
    from transformers import CLIPVisionConfig, CLIPVisionModel

    if opts.model_path:
        enc = CLIPVisionModel.from_pretrained(Path(opts.model_path) / "image_encoder", torch_dtype=torch.float32)
        return enc.to(device).eval()
    with _seeded(RANDOM_SEED + 2, device), device:
        enc = CLIPVisionModel(CLIPVisionConfig(**opts.preset_spec.image_encoder))
    return enc.eval().requires_grad_(False)


class ByteTokenizer:
    """A stand-in tokenizer for random-weight presets (no tokenizer files offline): UTF-8 bytes
    shifted past the special ids, then ``</s>``; called like a Hugging Face tokenizer."""

    pad_token_id = 0
    eos_token_id = 1

    def __init__(self, vocab_size: int):
        self.vocab_size = vocab_size

    def __call__(self, texts, padding="max_length", max_length=512, truncation=True, add_special_tokens=True,
                 return_attention_mask=True, return_tensors="pt"):  # fmt: skip
        import torch

        texts = [texts] if isinstance(texts, str) else list(texts)
        ids = torch.zeros(len(texts), max_length, dtype=torch.long)
        mask = torch.zeros(len(texts), max_length, dtype=torch.long)
        for i, t in enumerate(texts):
            toks = [2 + (b % (self.vocab_size - 2)) for b in t.encode("utf-8")][: max_length - 1] + [self.eos_token_id]
            ids[i, : len(toks)] = torch.tensor(toks)
            mask[i, : len(toks)] = 1

        class _Out(dict):
            __getattr__ = dict.__getitem__

        return _Out(input_ids=ids, attention_mask=mask)


def load_text_encoder(opts: Any, device: Any):
    """``(tokenizer, umt5_encoder)`` (both backends); for cache building only."""
    import torch
    from transformers import UMT5Config, UMT5EncoderModel

    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    if opts.model_path:
        from transformers import AutoTokenizer

        root = Path(opts.model_path)
        tok = AutoTokenizer.from_pretrained(root / "tokenizer")
        return tok, UMT5EncoderModel.from_pretrained(root / "text_encoder", torch_dtype=dtype).to(device).eval()
    cfg = UMT5Config(**opts.preset_spec.text_encoder)
    with _seeded(RANDOM_SEED + 3, device), _default_dtype(dtype), device:
        enc = UMT5EncoderModel(cfg)
    return ByteTokenizer(cfg.vocab_size), enc.eval().requires_grad_(False)
