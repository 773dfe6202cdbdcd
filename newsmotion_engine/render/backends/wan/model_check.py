"""The diffusers-format checkpoint layout of ``newsmotion model check DIR`` (the registry, the
record and the weight-file readers are :mod:`newsmotion_engine.render.model_check`'s).

A backend whose model folder is a diffusers pipeline folder registers it with
:func:`register_checkpoint`: the pipeline classes its index (``model_index.json`` or
``modular_model_index.json``) may name (``WanAnimatePipeline`` -> ``wan-animate``;
``WanAnimate2ModularPipeline`` / ``WanAnimate2DistilledModularPipeline`` -> ``wan-animate-2``;
``SCAIL2Pipeline`` -> ``scail-2``; ``StableVideoDiffusionPipeline`` -> ``mimicmotion``). Its check
runs the backend's own folder check (the same check a render runs, so a folder this accepts is one
a render loads); then each component's class, its config's main sizes, and its safetensors files'
tensor count, parameters, dtypes and bytes, read from the **headers only**; then the rows of the
backend's own files (``extra_rows``: MimicMotion's checkpoint, SCAIL-2's official key names). The
denoiser's config is compared with the released one (:mod:`.released`), and the options a render
with this ``model_path`` and nothing else would use are listed (segment frames, steps, CFG,
scheduler).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from newsmotion_engine.errors import BadInputError
from newsmotion_engine.render.backends.wan.diffusers_config import pipeline_index, read_json
from newsmotion_engine.render.model_check import (INDEXED, MARKED, MAYBE, NOT_MINE, ModelCheck, ModelLayout, Row, compare_config,
                                                component_row, register_layout)

__all__ = ["COMPONENT_SIZES", "register_checkpoint", "scheduler_text"]


@dataclass(frozen=True)
class _Checkpoint:
    pipeline_classes: tuple[str, ...]
    check_folder: Callable[[Path], None]
    options: type  # the backend's DiffusersOptions subclass
    release: tuple[Path, str] | None = None  # (released denoiser config.json, what it describes); None: wan/released
    marker: Callable[[Path], bool] | None = None
    extra_rows: Callable[[Path], list[Row]] | None = None


# backend name -> the checkpoints it renders (filled by register_checkpoint)
_CHECKPOINTS: dict[str, _Checkpoint] = {}


def register_checkpoint(backend: str, pipeline_classes: tuple[str, ...], check_folder: Callable[[Path], None], options: type,
                        release: tuple[Path, str] | None = None, *, marker: Callable[[Path], bool] | None = None,
                        extra_rows: Callable[[Path], list[Row]] | None = None, expects: str | None = None) -> None:  # fmt: skip
    """Register ``backend``'s diffusers checkpoint layout with ``newsmotion model check``: the
    pipeline classes its folder index may name, the folder check its render runs, its options
    class (for the defaults), for a backend whose released configs live in its own package
    ``release`` (its released denoiser ``config.json``, the checkpoint it describes), ``marker``
    (a file only this backend's folder has, so that a folder without its index is still
    recognised and told what it lacks), ``extra_rows`` (the rows of its own files) and ``expects``
    (one line: the folder's layout, shown when no layout claims a folder; default: the index)."""
    _CHECKPOINTS[backend] = _Checkpoint(tuple(pipeline_classes), check_folder, options, release, marker, extra_rows)
    expects = expects or f"a diffusers folder whose model_index.json names {' / '.join(pipeline_classes)}"
    register_layout(backend, ModelLayout(expects=expects,
                                         claims=partial(_claims, backend), check=partial(_check, backend)))  # fmt: skip


_COMPONENTS = ("transformer", "unet", "vae", "image_encoder", "text_encoder", "scheduler", "tokenizer", "image_processor",
               "feature_extractor")
# Config keys worth showing per component (the architecture at a glance).
COMPONENT_SIZES = {
    "transformer": ("num_layers", "num_attention_heads", "num_heads", "attention_head_dim", "dim", "ffn_dim", "in_channels", "in_dim"),
    "unet": ("block_out_channels", "num_attention_heads", "num_frames", "in_channels"),
    "vae": ("base_dim", "z_dim", "dim_mult", "block_out_channels", "latent_channels"),
    "image_encoder": ("hidden_size", "num_hidden_layers", "image_size", "patch_size"),
    "text_encoder": ("d_model", "num_layers", "vocab_size"),
    "scheduler": ("flow_shift", "shift", "prediction_type"),
}


def _index_class(root: Path) -> tuple[str | None, Path | None]:
    index = pipeline_index(root)
    if index is None:
        return None, None
    try:
        return read_json(index).get("_class_name"), index
    except BadInputError:
        return None, index  # an unreadable index: the check names it


def _claims(backend: str, root: Path) -> int:
    checkpoint = _CHECKPOINTS[backend]
    if checkpoint.marker is not None and checkpoint.marker(root):
        return MARKED
    cls, index = _index_class(root)
    if index is None:
        return NOT_MINE
    return INDEXED if cls in checkpoint.pipeline_classes else MAYBE


def _check(backend: str, root: Path) -> ModelCheck:
    """The folder as ``backend``'s checkpoint; a folder whose index names a pipeline no backend
    renders is refused naming the classes that are rendered."""
    checkpoint = _CHECKPOINTS[backend]
    cls, index = _index_class(root)
    if index is not None and cls not in checkpoint.pipeline_classes:
        read_json(index)  # an unreadable index: named
        known = ", ".join(c for each in _CHECKPOINTS.values() for c in each.pipeline_classes)
        raise BadInputError(index, f"is a {cls!r} pipeline; newsmotion renders {known}")
    checkpoint.check_folder(root)
    rows = [row for name in _COMPONENTS if (row := component_row(root, name, COMPONENT_SIZES.get(name, ()))) is not None]
    if checkpoint.extra_rows is not None:
        rows += checkpoint.extra_rows(root)
    return ModelCheck(root, backend, str(cls), rows, _release_text(backend, root), _defaults(backend, root),
                      options=f"--backend {backend} -o model_path={root}")  # fmt: skip


def _release_text(backend: str, root: Path) -> str:
    from newsmotion_engine.render.backends.wan.released import RELEASES, released_config

    release = _CHECKPOINTS[backend].release
    if release is not None:
        theirs, repo = read_json(release[0]), release[1]
    else:
        theirs, repo = released_config(backend, "transformer/config.json"), RELEASES[backend][1]
    # The denoiser's folder: the released file's own (``unet`` for SVD-based models), else ``transformer``.
    component = release[0].parent.name if release is not None else "transformer"
    return compare_config(component, read_json(root / component / "config.json"), theirs, repo)


def scheduler_text(opts: Any) -> str:
    """The scheduler a backend with options ``opts`` samples with (the folder's, as the backend
    reads it), and its shift."""
    scheduler = opts.scheduler_config()
    shift = opts.scheduler_shift(scheduler)
    return f"{scheduler.get('_class_name', '?')}" + (f" (shift {shift})" if shift is not None else "")


def _defaults(backend: str, root: Path) -> dict[str, Any]:
    opts = _CHECKPOINTS[backend].options.from_mapping({"model_path": str(root)})
    steps = getattr(opts, "num_steps", None) or opts.steps
    cfg = getattr(opts, "cfg_scale", None) or opts.guidance_scale
    out = {"segment frames": opts.segment_length, "steps": steps, "CFG": cfg, "scheduler": scheduler_text(opts)}
    from newsmotion_engine.render.backends.wan.lora import steps_warning

    if warning := steps_warning(opts):
        out["warning"] = warning
    return out
