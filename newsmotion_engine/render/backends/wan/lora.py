"""LoRAs fused into a Wan transformer before any acceleration (the ``lora`` option of both
diffusers backends).

Most users run Wan2.2-Animate with a step-distillation LoRA (e.g. lightx2v's 4-step one) and
Wan-Animate-2 with its distilled release; a LoRA here is loaded with diffusers' own LoRA loading
(peft), **fused** into the linear weights at ``scale`` and unloaded again, so the model that
renders is a plain transformer with new weights: the accelerations (FP8 first, through the
registry) see the fused weights, and nothing LoRA-specific runs per step.

The option (CLI ``-o lora=...``, the renderer resource's ``options``)::

    lora=/models/lightx2v_4step.safetensors              # scale 1
    lora=/models/a.safetensors:0.8,/models/b.safetensors  # several: comma- or semicolon-separated
    {"lora": ["/models/a.safetensors:0.8", "/models/b.safetensors"]}   # or a list

``PATH[:SCALE]``: the text after the last ``:`` is the scale when it is a number. Each file is a
safetensors LoRA in one of the released layouts:

- Wan-native (lightx2v, the Wan repos, ComfyUI): ``diffusion_model.blocks.0.self_attn.q.lora_down.weight``
  / ``lora_up.weight`` / ``alpha`` (also ``lora_A``/``lora_B``); ``.diff_b`` bias deltas.
- diffusers / peft: ``transformer.blocks.0.attn1.to_q.lora_A.weight`` / ``lora_B.weight``.

wan-animate's transformer (``WanAnimateTransformer3DModel``) reads them through diffusers'
``WanLoraLoaderMixin.lora_state_dict`` (its Wan-native and musubi conversions). Wan-Animate-2's
transformer keeps the Wan-native module names except the attention projections, so its keys go
through diffusers' own Wan-Animate-2 checkpoint renames (``convert_wan_animate_2_transformer_to_diffusers``:
``self_attn.q`` -> ``self_attn.to_q``...); Wan-native full-weight deltas (``.diff``, ``.diff_b``)
are added to the weights directly (``weight += scale * diff``). In both, the delta of a LoRA pair
is ``scale * up @ down * alpha / rank``.

A file that cannot be read, holds no LoRA, or targets modules the transformer does not have
is one :class:`~newsmotion_engine.errors.BadInputError` naming the file.

Few steps without distillation (:func:`few_steps_warning`): a LoRA-less render at 8 steps or fewer
on a checkpoint that is not a distilled one is almost certainly a mistake (blurred, half-denoised
frames); the backends log it once and report it in ``describe()``.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from newsmotion_engine.errors import BadInputError

__all__ = [
    "FEW_STEPS",
    "LoraSpec",
    "few_steps_warning",
    "is_distilled_checkpoint",
    "fuse_loras",
    "lora_identity",
    "lora_state_dict",
    "parse_lora_option",
    "steps_warning",
    "warn_once",
]

log = logging.getLogger(__name__)
FEW_STEPS = 8  # at or below this many steps a base checkpoint needs a distillation LoRA
_SEPARATORS = re.compile(r"[,;]")
_NATIVE_PREFIXES = ("model.diffusion_model.", "diffusion_model.")
_DELTA_SUFFIXES = (".diff", ".diff_b")


@dataclass(frozen=True)
class LoraSpec:
    """One LoRA file and the scale its delta is fused at."""

    path: str
    scale: float = 1.0

    def __str__(self) -> str:
        return self.path if self.scale == 1.0 else f"{self.path}:{self.scale:g}"


def _one(text: str) -> LoraSpec:
    text = text.strip()
    path, sep, tail = text.rpartition(":")
    if sep:
        try:
            return LoraSpec(path.strip(), float(tail))
        except ValueError:
            pass  # a ':' inside the path, not a scale
    return LoraSpec(text)


def parse_lora_option(value: Any) -> tuple[LoraSpec, ...]:
    """The ``lora`` option as :class:`LoraSpec` s: a ``"PATH[:SCALE]"`` string (several comma- or
    semicolon-separated), a list of such strings, ``LoraSpec`` s or ``{"path", "scale"}`` dicts;
    None or empty -> ``()``.

    Raises:
        ValueError: anything else, an empty path, or a scale that is not finite.
    """
    if value is None:
        return ()
    items: Iterable[Any] = _SEPARATORS.split(value) if isinstance(value, str) else value
    if isinstance(value, (bytes, Mapping)) or not hasattr(items, "__iter__"):
        raise ValueError("give PATH[:SCALE] strings, comma- or semicolon-separated, or a list of them")
    specs = []
    for item in items:
        if isinstance(item, LoraSpec):
            spec = item
        elif isinstance(item, str):
            if not item.strip():
                continue
            spec = _one(item)
        elif isinstance(item, Mapping) and "path" in item:
            spec = LoraSpec(str(item["path"]), float(item.get("scale", 1.0)))
        else:
            raise ValueError(f"{item!r} is not PATH[:SCALE]")
        if not spec.path:
            raise ValueError(f"{item!r} has no path")
        if spec.scale != spec.scale or abs(spec.scale) == float("inf"):
            raise ValueError(f"{item!r}: the scale must be a finite number")
        specs.append(spec)
    return tuple(specs)


def lora_identity(loras: Iterable[LoraSpec]) -> list[dict[str, Any]]:
    """What caches are keyed on for these LoRAs: file name, byte size and scale (the model folder's
    identity is names and sizes too)."""
    out = []
    for spec in loras:
        p = Path(spec.path)
        out.append({"file": p.name, "bytes": p.stat().st_size if p.is_file() else None, "scale": spec.scale})
    return out


def few_steps_warning(steps: int, loras: Iterable[LoraSpec], distilled: bool) -> str | None:
    """The warning for ``steps`` <= :data:`FEW_STEPS` with no LoRA on a checkpoint that is not a
    distilled one (None when it does not apply)."""
    if steps > FEW_STEPS or distilled or tuple(loras):
        return None
    return (f"{steps} steps without a step-distillation LoRA or a distilled checkpoint: the base model needs "
            f"~20-40 steps; add -o lora=PATH (e.g. the 4-step lightx2v LoRA) or raise steps")  # fmt: skip


# ---------------------------------------------------------------------------------- reading
def _read(path: Path) -> dict[str, Any]:
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    if not path.is_file():
        raise BadInputError(path, "LoRA file does not exist (the lora option names a safetensors file)")
    try:
        state = load_file(str(path))
    except (SafetensorError, OSError, ValueError, RuntimeError) as exc:
        raise BadInputError(path, f"is not a readable safetensors LoRA ({exc})") from None
    if not any(".lora_" in k for k in state):
        raise BadInputError(path, "holds no LoRA weights (no lora_down/lora_up or lora_A/lora_B keys)")
    return state


def _is_wan_animate_2(transformer: Any) -> bool:
    return type(transformer).__name__ == "WanAnimate2Transformer3DModel"


def _wan_animate_2_state(state: dict[str, Any], path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(peft state dict with a "transformer." prefix, {parameter name: full delta})`` for
    Wan-Animate-2's module names."""
    from diffusers.loaders.single_file_utils import convert_wan_animate_2_transformer_to_diffusers

    native = {}
    for key, value in state.items():
        for prefix in (*_NATIVE_PREFIXES, "transformer."):
            if key.startswith(prefix):
                key = key[len(prefix) :]
                break
        native[key] = value
    # diffusers' own key renames of the released Wan-Animate-2 checkpoint (q -> to_q, k_img ->
    # add_k_proj, the in-context `block.` wrapper); LoRA suffixes ride along unchanged.
    renamed = convert_wan_animate_2_transformer_to_diffusers(native)
    peft, deltas = {}, {}
    for key, value in renamed.items():
        if key.endswith(_DELTA_SUFFIXES):
            base = key.rsplit(".", 1)[0]
            deltas[base + (".bias" if key.endswith(".diff_b") else ".weight")] = value
            continue
        module, _, kind = key.partition(".lora_")
        if kind.startswith(("down.", "A.")):
            peft[f"transformer.{module}.lora_A.weight"] = value
        elif kind.startswith(("up.", "B.")):
            peft[f"transformer.{module}.lora_B.{kind.split('.', 1)[1]}"] = value
        elif key.endswith(".alpha"):
            continue  # folded into lora_A below
        else:
            raise BadInputError(path, f"key {key!r} is neither a LoRA pair, an alpha nor a .diff delta")
    for key, value in renamed.items():
        if key.endswith(".alpha"):
            down = peft.get(f"transformer.{key[: -len('.alpha')]}.lora_A.weight")
            if down is None:
                raise BadInputError(path, f"{key!r} has no lora_down weight beside it")
            peft[f"transformer.{key[: -len('.alpha')]}.lora_A.weight"] = down * (float(value) / down.shape[0])
    return peft, deltas


def lora_state_dict(path: str | Path, transformer: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(peft LoRA state dict keyed "transformer.<module>.lora_A/B...", {parameter: delta})`` of
    one file, converted for ``transformer``'s module names (see the module docstring)."""
    path = Path(path)
    state = _read(path)
    if _is_wan_animate_2(transformer):
        peft, deltas = _wan_animate_2_state(state, path)
    else:
        from diffusers.loaders import WanLoraLoaderMixin

        try:
            peft, deltas = WanLoraLoaderMixin.lora_state_dict(state), {}
        except (ValueError, KeyError) as exc:
            raise BadInputError(path, f"is not a Wan LoRA diffusers can convert ({exc or type(exc).__name__})") from None
        peft = {(k if k.startswith("transformer.") else f"transformer.{k}"): v for k, v in peft.items()}
    _check_targets(path, transformer, peft, deltas)
    return peft, deltas


def _check_targets(path: Path, transformer: Any, peft: dict[str, Any], deltas: dict[str, Any]) -> None:
    """Every module a LoRA pair names and every parameter a delta names must exist (peft would
    only warn and skip them: a silently half-applied LoRA)."""
    modules = dict(transformer.named_modules())
    params = dict(transformer.named_parameters())
    wanted = sorted({k[len("transformer.") :].split(".lora_")[0] for k in peft})
    missing = [m for m in wanted if m not in modules] + [p for p in sorted(deltas) if p not in params]
    if missing:
        shown = ", ".join(missing[:3]) + (f" (+{len(missing) - 3} more)" if len(missing) > 3 else "")
        raise BadInputError(path, f"targets {len(missing)} module(s) {type(transformer).__name__} does not have: {shown} "
                                  "(a LoRA for another model or size?)")  # fmt: skip
    for p, delta in deltas.items():
        if tuple(delta.shape) != tuple(params[p].shape):
            raise BadInputError(path, f"delta for {p} has shape {tuple(delta.shape)}, the model's is {tuple(params[p].shape)}")


# ---------------------------------------------------------------------------------- fusing
def fuse_loras(transformer: Any, loras: Iterable[LoraSpec], identity: dict[str, Any]) -> dict[str, Any]:
    """Fuse each LoRA into ``transformer`` in place (loaded as a peft adapter through diffusers'
    ``load_lora_adapter``, merged at its scale with ``fuse_lora``, then unloaded, so the model holds
    plain linears with the fused weights) and return ``identity`` with the LoRAs in it (and a new
    digest); no LoRAs: ``identity`` unchanged. Call before any acceleration (FP8 quantizes what it
    finds).

    Raises:
        BadInputError: a file that is missing, unreadable, not a LoRA, or for another model.
    """
    import torch

    from newsmotion_engine.cachedir import sha256_json

    loras = tuple(loras)
    if not loras:
        return identity
    for i, spec in enumerate(loras):
        peft, deltas = lora_state_dict(spec.path, transformer)
        name = f"newsmotion_lora_{i}"
        if peft:
            try:
                transformer.load_lora_adapter(peft, prefix="transformer", adapter_name=name)
                transformer.fuse_lora(lora_scale=spec.scale, adapter_names=[name])
            except (ValueError, RuntimeError, KeyError) as exc:
                raise BadInputError(Path(spec.path), f"could not be loaded into {type(transformer).__name__} ({exc})") from None
            finally:
                if getattr(transformer, "peft_config", None):
                    transformer.unload_lora()  # merged layers keep the fused weights
        params = dict(transformer.named_parameters())
        with torch.no_grad():
            for p, delta in deltas.items():
                params[p].add_(delta.to(params[p].device, params[p].dtype), alpha=spec.scale)
        log.info("fused LoRA %s at scale %g: %d adapted modules, %d full deltas", spec.path, spec.scale,
                 len({k.split('.lora_')[0] for k in peft}), len(deltas))  # fmt: skip
    ident = {k: v for k, v in identity.items() if k != "digest"}
    ident["loras"] = lora_identity(loras)
    return {**ident, "digest": sha256_json(ident)[:16]}


def is_distilled_checkpoint(opts: Any) -> bool:
    """Whether the options' model samples in few steps by itself: a folder whose pipeline class is
    a distilled one (``WanAnimate2DistilledModularPipeline``), or, with random weights, the
    ``distilled`` schedule."""
    if not opts.model_path:
        return getattr(opts, "schedule", None) == "distilled"
    from newsmotion_engine.render.backends.wan.diffusers_config import folder_pipeline_class

    found = folder_pipeline_class(opts.model_path)
    return found is not None and "Distilled" in found[0]


def steps_warning(opts: Any) -> str | None:
    """:func:`few_steps_warning` for a backend's options (their steps, LoRAs and checkpoint); None
    for a preset's random weights (no checkpoint to distil)."""
    if not opts.model_path:
        return None
    steps = getattr(opts, "num_steps", None) or opts.steps
    return few_steps_warning(int(steps), opts.lora, is_distilled_checkpoint(opts))


_warned: set[str] = set()


def warn_once(logger: logging.Logger, message: str | None) -> None:
    """Log ``message`` as a warning the first time this process sees it."""
    if message and message not in _warned:
        _warned.add(message)
        logger.warning(message)
