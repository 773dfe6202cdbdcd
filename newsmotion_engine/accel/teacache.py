"""TeaCache for the Wan-Animate and Wan-Animate-2 transformers, as a removable diffusers ``ModelHook``.

TeaCache (Liu et al., "Timestep Embedding Tells: It's Time to Cache for Video Diffusion Model",
https://arxiv.org/abs/2411.19108) skips a denoiser call when the model input has barely changed,
judged cheaply from the *modulated timestep embedding*: per call it computes the relative L1
change of that embedding since the previous call, maps it through a rescale polynomial fitted on
a full run, and accumulates it. While the accumulated value stays under ``threshold`` the call is
skipped and the previous output is reused; once it reaches the threshold the model runs and the
accumulator resets. The first ``warmup_steps`` calls always run.

Here the embedding is the Animate transformer's ``timestep_proj`` (time embedder -> SiLU ->
``time_proj``, the 6-way modulation of every block), a few small matmuls; Wan-Animate-2's is the
same product of its ``time_embedding`` / ``time_projection``. Wan-Animate-2's reference pass
(``kv_cache_mode="extract"``) always runs and touches no state: it fills the K/V cache the
denoising calls read, and is not a denoising call. A skipped call reuses
the previous *output* (the flow velocity) of the same context; diffusers has no TeaCache and its
FirstBlock/Mag caches reject this transformer (its face adapter runs between blocks).

State is per cache context (``transformer.cache_context("cond")`` / ``"uncond"``; Wan-Animate-2's
transformer has no ``cache_context``: :func:`teacache_context` does the same for this hook), so
CFG's two passes never share an accumulator, and :func:`reset_teacache` (or the registry's
``reset_stateful_hooks``) clears it between renders. Calibration: run with ``record=True`` and a
threshold of 0 (every call computed), then :func:`fit_rescale` fits the polynomial from the
recorded (embedding change, output change) pairs.

Example::

    apply_teacache(transformer, TeaCache(threshold=0.15))   # or through the registry
    with transformer.cache_context("cond"):
        out = transformer(...)
    remove_teacache(transformer)
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import torch
from diffusers.hooks import HookRegistry
from diffusers.hooks.hooks import BaseState, CacheContext, ModelHook, StateManager

from newsmotion_engine.accel.registry import AccelConfig, AccelConfigError, AccelHandle, register_acceleration

__all__ = [
    "HOOK_NAME",
    "TeaCache",
    "TeaCacheHook",
    "apply_teacache",
    "fit_rescale",
    "recorded_pairs",
    "remove_teacache",
    "reset_teacache",
    "teacache_context",
    "teacache_stats",
]

HOOK_NAME = "newsmotion_teacache"
MAX_THRESHOLD = 10.0


@dataclass(frozen=True)
class TeaCache(AccelConfig):
    """TeaCache settings (registry order 40; options ``teacache``, ``teacache_warmup``,
    ``teacache_coefficients``, ``teacache_record``).

    Args:
        threshold: accumulated rescaled change under which calls are skipped, 0..10; 0 computes
            every call (bit-identical to no cache). 0.15 is the usual starting point.
        warmup_steps: the first calls of each context always run.
        coefficients: rescale polynomial, highest power first (numpy ``polyval`` order). The default
            ``(1, 0)`` is the identity: fit real ones with :func:`fit_rescale` for real weights.
        record: keep (embedding change, output change) pairs of computed calls for calibration;
            needs ``threshold=0`` (a recorded run computes every step).
    """

    technique: ClassVar[str] = "teacache"
    threshold: float = 0.15
    warmup_steps: int = 1
    coefficients: tuple[float, ...] = (1.0, 0.0)
    record: bool = False

    def __post_init__(self) -> None:
        if not _is_number(self.threshold) or not 0.0 <= float(self.threshold) <= MAX_THRESHOLD:
            raise AccelConfigError(f"TeaCache threshold {self.threshold!r}: use 0 (compute every step) .. {MAX_THRESHOLD:g}; 0.15 is typical")
        if not isinstance(self.warmup_steps, int) or isinstance(self.warmup_steps, bool) or self.warmup_steps < 0:
            raise AccelConfigError(f"TeaCache warmup_steps {self.warmup_steps!r}: use an integer >= 0")
        coeffs = self.coefficients
        if isinstance(coeffs, (str, bytes)) or not isinstance(coeffs, Sequence) or not coeffs or not all(_is_number(c) for c in coeffs):
            raise AccelConfigError(f"TeaCache coefficients {coeffs!r}: give a list of at least one number (highest power first)")
        if not isinstance(self.record, bool):
            raise AccelConfigError(f"TeaCache record={self.record!r}: use true or false")
        if self.record and self.threshold > 0:
            raise AccelConfigError("TeaCache record needs threshold 0: a recorded run computes every step")
        object.__setattr__(self, "threshold", float(self.threshold))
        object.__setattr__(self, "coefficients", tuple(float(c) for c in coeffs))


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


class TeaCacheState(BaseState):
    """One context's memory: previous embedding and output, accumulator, counters."""

    def __init__(self) -> None:
        self.reset()

    def reset(self, *args: Any, **kwargs: Any) -> None:
        self.prev_embedding: torch.Tensor | None = None
        self.prev_output: Any = None
        self.prev_computed_output: torch.Tensor | None = None
        self.accumulated = 0.0
        self.calls = 0
        self.pending_change: float | None = None


@dataclass
class _Totals:
    computed: int = 0
    skipped: int = 0
    records: list[tuple[float, float]] = field(default_factory=list)


class TeaCacheHook(ModelHook):
    """Wraps the transformer's forward: decide, then run or reuse (see the module docstring)."""

    _is_stateful = True

    def __init__(self, config: TeaCache) -> None:
        super().__init__()
        self.config = config
        self.state_manager = StateManager(TeaCacheState)
        self.totals = _Totals()

    def reset_state(self, module: torch.nn.Module) -> torch.nn.Module:
        self.state_manager.reset()
        # Calibration records span every trajectory of a recorded run; counters are per reset.
        self.totals = _Totals(records=self.totals.records)
        return module

    @torch.compiler.disable
    def _decide(self, state: TeaCacheState, embedding: torch.Tensor) -> bool:
        # Data-dependent control flow stays out of any compiled region (STYLE 5).
        state.calls += 1
        if state.prev_embedding is None or state.prev_output is None or state.calls <= self.config.warmup_steps:
            state.pending_change = None
            state.accumulated = 0.0
            return True
        prev = state.prev_embedding
        change = ((embedding - prev).abs().mean() / prev.abs().mean().clamp_min(1e-12)).item()
        state.pending_change = change
        if self.config.threshold <= 0:
            return True
        state.accumulated += float(np.polyval(self.config.coefficients, change))
        if state.accumulated < self.config.threshold:
            return False
        state.accumulated = 0.0
        return True

    def new_forward(self, module: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("kv_cache_mode") == "extract":  # Wan-Animate-2's reference pass (module docstring)
            return self.fn_ref.original_forward(*args, **kwargs)
        state = self.state_manager.get_state()
        embedding = _modulated_timestep_embedding(module, args, kwargs)
        compute = self._decide(state, embedding)
        state.prev_embedding = embedding
        if not compute:
            self.totals.skipped += 1
            return state.prev_output
        output = self.fn_ref.original_forward(*args, **kwargs)
        sample = output[0] if isinstance(output, tuple) else output.sample
        if isinstance(sample, list):  # Wan-Animate-2 returns one tensor per batch entry
            sample = torch.stack(sample)
        if self.config.record:
            if state.pending_change is not None and state.prev_computed_output is not None:
                prev = state.prev_computed_output
                out_change = ((sample.float() - prev).abs().mean() / prev.abs().mean().clamp_min(1e-12)).item()
                self.totals.records.append((state.pending_change, out_change))
            state.prev_computed_output = sample.float()
        state.prev_output = output
        self.totals.computed += 1
        return output


def _modulated_timestep_embedding(module: Any, args: tuple, kwargs: dict):
    """``timestep_proj`` of the Animate (or Animate-2) transformer for this call's timestep (float32)."""
    timestep = kwargs.get("timestep", args[1] if len(args) > 1 else None)
    if timestep is None:
        raise TypeError("TeaCache: the transformer was called without a timestep")
    if not hasattr(module, "condition_embedder"):  # Wan-Animate-2: as its forward computes it
        with torch.no_grad():
            t = module.timesteps_proj(timestep).to(next(module.time_embedding.parameters()).dtype)
            return module.time_projection(module.time_embedding(t)).float()
    emb = module.condition_embedder
    with torch.no_grad():
        t = emb.timesteps_proj(timestep)
        w = emb.time_embedder.linear_1.weight
        temb = emb.time_embedder(t.to(w.dtype if w.dtype.is_floating_point else torch.float32))
        proj = emb.time_proj(emb.act_fn(temb).to(emb.time_proj.weight.dtype if emb.time_proj.weight.dtype.is_floating_point else temb.dtype))
    return proj.float()


def _has_timestep_embedding(transformer: Any) -> bool:
    if hasattr(transformer, "condition_embedder"):
        return hasattr(transformer.condition_embedder, "time_proj")
    return all(hasattr(transformer, name) for name in ("timesteps_proj", "time_embedding", "time_projection"))


def apply_teacache(transformer: Any, config: TeaCache) -> Any:
    """Register the TeaCache hook on ``transformer`` (a ``WanAnimateTransformer3DModel`` or a
    ``WanAnimate2Transformer3DModel``)."""
    if not _has_timestep_embedding(transformer):
        raise TypeError("TeaCache needs a Wan-Animate transformer (condition_embedder) or a Wan-Animate-2 one "
                        f"(time_embedding / time_projection), got {type(transformer).__name__}")  # fmt: skip
    hook = TeaCacheHook(config)
    HookRegistry.check_if_exists_or_initialize(transformer).register_hook(hook, HOOK_NAME)
    return hook


def _get_hook(transformer: Any):
    registry = getattr(transformer, "_diffusers_hook", None)
    return registry.get_hook(HOOK_NAME) if registry is not None else None


def remove_teacache(transformer: Any) -> None:
    """Remove the hook (no-op when absent); the transformer's forward is the original again."""
    registry = getattr(transformer, "_diffusers_hook", None)
    if registry is not None and registry.get_hook(HOOK_NAME) is not None:
        registry.remove_hook(HOOK_NAME, recurse=False)


@contextmanager
def teacache_context(transformer: Any, name: str) -> Iterator[None]:
    """``transformer.cache_context(name)`` for the TeaCache hook alone, for a transformer without
    diffusers' ``CacheMixin`` (Wan-Animate-2); a no-op when the hook is not applied."""
    hook = _get_hook(transformer)
    if hook is None:
        yield
        return
    hook.state_manager.set_context(CacheContext(name))
    try:
        yield
    finally:
        hook.state_manager.set_context(None)


def reset_teacache(transformer: Any) -> None:
    """Forget every context's state (call between renders / segments)."""
    hook = _get_hook(transformer)
    if hook is not None:
        hook.reset_state(transformer)


def teacache_stats(transformer: Any) -> dict[str, Any]:
    """``{"computed", "skipped", "skip_ratio"}`` since the last reset (zeros when not applied)."""
    hook = _get_hook(transformer)
    if hook is None:
        return {"computed": 0, "skipped": 0, "skip_ratio": 0.0}
    c, s = hook.totals.computed, hook.totals.skipped
    return {"computed": c, "skipped": s, "skip_ratio": round(s / (c + s), 4) if c + s else 0.0}


def recorded_pairs(transformer: Any) -> list[tuple[float, float]]:
    hook = _get_hook(transformer)
    return list(hook.totals.records) if hook is not None else []


def fit_rescale(pairs: Sequence[tuple[float, float]], degree: int = 4) -> tuple[float, ...]:
    """Fit the rescale polynomial (highest power first) mapping embedding change to output change
    from recorded pairs of a full run (:func:`recorded_pairs`). Needs more pairs than ``degree``."""
    arr = np.asarray(pairs, dtype=np.float64)
    if arr.ndim != 2 or arr.shape[0] <= degree:
        raise ValueError(f"fit_rescale needs more than {degree} recorded pairs, got {len(arr)}; record a longer run")
    return tuple(float(c) for c in np.polyfit(arr[:, 0], arr[:, 1], degree))


def _apply(components: Any, config: TeaCache) -> AccelHandle:
    apply_teacache(components.transformer, config)
    return AccelHandle(report=config.fields())


def _remove(components: Any, handle: AccelHandle) -> None:
    remove_teacache(components.transformer)


register_acceleration(TeaCache, order=40, apply=_apply, remove=_remove)
