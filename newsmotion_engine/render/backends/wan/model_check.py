"""Whether a folder is a usable diffusers checkpoint, for which backend, and what it implies
(``newsmotion model check DIR``).

:func:`check_model` reads only small files: the pipeline index (``model_index.json`` or
``modular_model_index.json``) names the backend (each Wan backend registers the pipeline classes
it renders, :func:`register_checkpoint`: ``WanAnimatePipeline`` -> ``wan-animate``;
``WanAnimate2ModularPipeline`` / ``WanAnimate2DistilledModularPipeline`` -> ``wan-animate-2``);
that backend's own folder check runs (the same check a render runs, so a folder this accepts is
one a render loads); then each component's class, its
config's main sizes, and its safetensors files' tensor count, parameters, dtypes and bytes, read
from the **headers only** (8-byte length + JSON; no weights are loaded). The transformer's
config is compared with the released one (:mod:`.released`), and the options a render with this
``model_path`` and nothing else would use are listed (segment frames, steps, CFG, scheduler).

A folder that is not usable raises :class:`~newsmotion_engine.errors.BadInputError` naming the
missing file or the wrong class.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from newsmotion_engine.errors import BadInputError
from newsmotion_engine.render.backends.wan.diffusers_config import pipeline_index, read_json

__all__ = ["ModelCheck", "check_model", "register_checkpoint", "safetensors_summary"]


@dataclass(frozen=True)
class _Checkpoint:
    pipeline_classes: tuple[str, ...]
    check_folder: Callable[[Path], None]
    options: type  # the backend's DiffusersOptions subclass
    release: tuple[Path, str] | None = None  # (released transformer config.json, what it describes); None: wan/released


# backend name -> the checkpoints it renders (filled by each Wan backend's register())
_CHECKPOINTS: dict[str, _Checkpoint] = {}


def register_checkpoint(backend: str, pipeline_classes: tuple[str, ...], check_folder: Callable[[Path], None],
                        options: type, release: tuple[Path, str] | None = None) -> None:  # fmt: skip
    """Let :func:`check_model` recognise ``backend``'s checkpoints: the pipeline classes its folder
    index may name, the folder check its render runs, its options class (for the defaults) and,
    for a backend whose released configs live in its own package, ``release``: (its released
    ``transformer/config.json``, the checkpoint it describes)."""
    _CHECKPOINTS[backend] = _Checkpoint(tuple(pipeline_classes), check_folder, options, release)

_COMPONENTS = ("transformer", "unet", "vae", "image_encoder", "text_encoder", "scheduler", "tokenizer", "image_processor",
               "feature_extractor")
# Config keys worth showing per component (the architecture at a glance).
_SIZES = {
    "transformer": ("num_layers", "num_attention_heads", "num_heads", "attention_head_dim", "dim", "ffn_dim", "in_channels", "in_dim"),
    "unet": ("block_out_channels", "num_attention_heads", "num_frames", "in_channels"),
    "vae": ("base_dim", "z_dim", "dim_mult", "block_out_channels", "latent_channels"),
    "image_encoder": ("hidden_size", "num_hidden_layers", "image_size", "patch_size"),
    "text_encoder": ("d_model", "num_layers", "vocab_size"),
    "scheduler": ("flow_shift", "shift", "prediction_type"),
}
_DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1,
                "F8_E4M3": 1, "F8_E5M2": 1}  # fmt: skip


@dataclass
class ModelCheck:
    """What :func:`check_model` found: the backend, one row per component
    (``component, class, config, weights``), the transformer compared with the release, and the
    defaults a render with this folder uses."""

    path: Path
    backend: str
    pipeline: str
    rows: list[tuple[str, str, str, str]] = field(default_factory=list)
    release: str = ""
    defaults: dict[str, Any] = field(default_factory=dict)


def safetensors_summary(files: list[Path]) -> dict[str, Any]:
    """Tensor count, parameter count, dtypes and bytes of safetensors files, from their headers
    only. Raises :class:`BadInputError` naming a file whose header is not safetensors."""
    tensors = params = size = 0
    dtypes: dict[str, int] = {}
    for f in files:
        try:
            with f.open("rb") as fh:
                (n,) = struct.unpack("<Q", fh.read(8))
                if n > 100_000_000:
                    raise ValueError(f"a {n}-byte header")
                header = json.loads(fh.read(n))
        except (OSError, ValueError, struct.error) as exc:
            raise BadInputError(f, f"is not a safetensors file (header unreadable: {exc})") from None
        for name, info in header.items():
            if name == "__metadata__":
                continue
            count = 1
            for d in info["shape"]:
                count *= d
            tensors += 1
            params += count
            dtypes[info["dtype"]] = dtypes.get(info["dtype"], 0) + count
        size += f.stat().st_size
    return {"files": len(files), "tensors": tensors, "params": params, "dtypes": dtypes, "bytes": size}


def _weights_text(folder: Path) -> str:
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        bins = sorted(folder.glob("*.bin"))
        return f"{len(bins)} .bin file(s) (pickle; not inspected)" if bins else ""
    s = safetensors_summary(files)
    dtypes = ", ".join(f"{k} {v / s['params']:.0%}" if len(s["dtypes"]) > 1 else k for k, v in sorted(s["dtypes"].items()))
    return f"{s['files']} file(s), {s['tensors']} tensors, {s['params'] / 1e9:.3f}B params, {dtypes}, {s['bytes'] / 2**30:.2f} GiB"


def _component_row(root: Path, name: str) -> tuple[str, str, str, str] | None:
    folder = root / name
    if not folder.is_dir():
        return None
    config_file = next((folder / n for n in ("config.json", "scheduler_config.json", "tokenizer_config.json", "preprocessor_config.json")
                        if (folder / n).is_file()), None)  # fmt: skip
    config = read_json(config_file) if config_file else {}
    cls = config.get("_class_name") or (config.get("architectures") or [None])[0] or config.get("tokenizer_class") \
        or config.get("image_processor_type") or "?"  # fmt: skip
    sizes = ", ".join(f"{k}={config[k]}" for k in _SIZES.get(name, ()) if k in config)
    return name, str(cls), sizes, _weights_text(folder)


def _backend_of(root: Path) -> tuple[str, str, Path]:
    if not root.is_dir():
        raise BadInputError(root, "is not a folder (give a diffusers-format checkpoint folder)")
    index = pipeline_index(root)
    if index is None:
        raise BadInputError(root / "model_index.json", "missing: not a diffusers checkpoint folder (no model_index.json or modular_model_index.json)")
    cls = read_json(index).get("_class_name")
    for backend, checkpoint in _CHECKPOINTS.items():
        if cls in checkpoint.pipeline_classes:
            return backend, cls, index
    known = ", ".join(c for checkpoint in _CHECKPOINTS.values() for c in checkpoint.pipeline_classes)
    raise BadInputError(index, f"is a {cls!r} pipeline; newsmotion renders {known}")


def _release_text(backend: str, root: Path) -> str:
    from newsmotion_engine.render.backends.wan.released import RELEASES, released_config

    release = _CHECKPOINTS[backend].release
    if release is not None:
        theirs, repo = read_json(release[0]), release[1]
    else:
        theirs, repo = released_config(backend, "transformer/config.json"), RELEASES[backend][1]
    # The denoiser's folder: the released file's own (``unet`` for SVD-based models), else ``transformer``.
    component = release[0].parent.name if release is not None else "transformer"
    ours = read_json(root / component / "config.json")
    differ = sorted(k for k in theirs if not k.startswith("_") and k in ours and ours[k] != theirs[k])
    if not differ:
        return f"{component} config matches {repo}"
    return f"{component} differs from {repo} in " + ", ".join(f"{k}={ours[k]!r} (released {theirs[k]!r})" for k in differ[:4])


def _defaults(backend: str, root: Path) -> dict[str, Any]:
    opts = _CHECKPOINTS[backend].options.from_mapping({"model_path": str(root)})
    steps = getattr(opts, "num_steps", None) or opts.steps
    cfg = getattr(opts, "cfg_scale", None) or opts.guidance_scale
    scheduler = opts.scheduler_config()  # the folder's, as the backend reads it
    shift = opts.scheduler_shift(scheduler)
    out = {"segment frames": opts.segment_length, "steps": steps, "CFG": cfg,
           "scheduler": f"{scheduler.get('_class_name', '?')}" + (f" (shift {shift})" if shift is not None else "")}  # fmt: skip
    from newsmotion_engine.render.backends.wan.lora import steps_warning

    if warning := steps_warning(opts):
        out["warning"] = warning
    return out


def check_model(path: str | Path) -> ModelCheck:
    """Check ``path`` as a checkpoint folder; see the module docstring.

    Raises:
        BadInputError: not a folder, no pipeline index, a pipeline no backend renders, or the
            backend's folder check failed (a missing file, no weights, a wrong transformer class).
    """
    root = Path(path)
    backend, pipeline, _ = _backend_of(root)
    _CHECKPOINTS[backend].check_folder(root)
    rows = [row for name in _COMPONENTS if (row := _component_row(root, name)) is not None]
    return ModelCheck(root, backend, pipeline, rows, _release_text(backend, root), _defaults(backend, root))
