"""Accelerations as typed, registered, removable add-ons.

Every acceleration is a frozen config dataclass (a subclass of :class:`AccelConfig`) defined in
the module that implements it, and a handler registered for that config type with an explicit
order (torchao's config-type -> handler registry, ``quantize_(model, config)``; diffusers'
``HookRegistry`` for removable hooks). A backend's options hold a tuple of configs; the backend
(and the benchmark, which measures the same code) calls :func:`apply_accelerations` once on its
loaded components and may call :func:`remove_accelerations` to undo them. Validation of a
config's fields lives in its ``__post_init__``, nowhere else.

The built-in techniques, in application order (lowest first):

====  ==================================  ==========================  ==========================
order config (module)                       apply                       remove
====  ==================================  ==========================  ==========================
10    ``Fp8Linears`` (:mod:`.fp8`)          swap block linears to FP8   put the bf16 linears back
                                                                        (only with
                                                                        ``keep_original=True``;
                                                                        otherwise irreversible)
20    ``FfnChunks`` (:mod:`.memory`)        chunk each block's FFN      unwrap
30    ``Attention`` (:mod:`.attention`)     pick the attention kernel   restore processors/backend
32    ``OneKeyCross``                       one-token cross-attention   the wrapped processors
      (:mod:`.one_key_cross`)               as its value, broadcast     again
33    ``ShortAttention``                    short self-attention        the wrapped processors
      (:mod:`.short_attention`)             sequences packed per        again
                                            Triton program
35    ``SparseAttention`` (:mod:`.sparse`)  block-sparse tile layout    dense again
                                            (experimental)
40    ``TeaCache`` (:mod:`.teacache`)       register the TeaCache hook  remove the hook
45    ``PyramidCascade`` (:mod:`.pyramid`)  first steps at low          full resolution
                                            resolution (experimental)   throughout
50    ``CFGSchedule`` (:mod:`.cfg`)         attach the CFG schedule to  plain CFG again
                                            the components (read at
                                            sampling time)
60    ``VaeTiling`` (:mod:`.memory`)        tiled VAE encode/decode     untiled again
70    ``ChannelsLast``                      conv weights NHWC / NDHWC   default order again
      (:mod:`.memory_format`)
72    ``CausalPadFold``                     Wan causal convs pad in     ``F.pad`` in space again
      (:mod:`.causal_pad`)                  space inside the conv
73    ``FusedVaeNorm``                      Wan VAE RMS norm + SiLU     the eager norm and SiLU
      (:mod:`.vae_norm`)                    in one Triton pass          again
75    ``Conv3dAs2d`` (:mod:`.conv3d`)       3-D convolutions by 2-D     the 3-D convolutions again
                                            ones
90    ``ContextParallel``                   split a segment's tokens    one process again
      (:mod:`.context_parallel`)            across GPUs (Ulysses)
98    ``CompileVae``                        regional ``torch.compile``  eager decoder blocks
      (:mod:`.compile_vae`)                 of the VAE decoder's blocks
100   ``Compile`` (:mod:`.compile`)         regional ``torch.compile``  drop the compiled forwards
                                            (last: sees final modules)
====  ==================================  ==========================  ==========================

Components: the object the handlers act on. The wan-animate backend passes its
``RenderComponents`` (``transformer``, ``vae``, ``cfg_schedule``); a handler touches only the
attributes it needs, so the forward benchmark can pass an object holding just a transformer.

Example::

    from newsmotion_engine.accel.attention import Attention
    from newsmotion_engine.accel.fp8 import Fp8Linears
    from newsmotion_engine.accel.registry import apply_accelerations, is_reversible, remove_accelerations

    configs = (Fp8Linears(mode="auto", keep_original=True), Attention("cudnn"))
    assert all(is_reversible(c) for c in configs)
    applied = apply_accelerations(components, configs)   # FP8 first, whatever the tuple's order
    applied.report        # {"fp8": {...}, "attention": {...}}: JSON-able, for telemetry
    remove_accelerations(components, applied)              # reverse order; the model is stock again

Adding an acceleration (e.g. sparse attention): in its module define a frozen dataclass
subclassing :class:`AccelConfig` with a class-level ``technique`` (its report key) and validation in
``__post_init__`` (raise :class:`AccelConfigError`); write ``apply(components, config) ->
AccelHandle`` (``report``: what it did, JSON-able; ``state``: what ``remove`` needs) and
``remove(components, handle)``; call ``register_acceleration(Config, order=N, apply=...,
remove=..., reversible=...)`` at module import, with an order no other technique uses. Backends
then accept it in their ``accelerations`` tuple; a flat option key for the CLI is added where the
backend parses its options (``render/backends/wan_animate/config.py``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from newsmotion_engine.errors import NewsmotionError

__all__ = [
    "AccelConfig",
    "AccelConfigError",
    "AccelHandle",
    "AppliedAccelerations",
    "IrreversibleAccelerationError",
    "UnknownAccelerationError",
    "apply_accelerations",
    "is_reversible",
    "ordered",
    "register_acceleration",
    "registered_accelerations",
    "remove_accelerations",
]


class AccelConfigError(NewsmotionError, ValueError):
    """An acceleration setting out of range (raised by the config's ``__post_init__``)."""


class UnknownAccelerationError(NewsmotionError, TypeError):
    """A config whose type has no registered handler (or that is not an :class:`AccelConfig`)."""


class IrreversibleAccelerationError(NewsmotionError, RuntimeError):
    """``remove_accelerations`` was asked to undo an acceleration that cannot be undone."""


@dataclass(frozen=True)
class AccelConfig:
    """Base of every acceleration config: a frozen dataclass, validated in ``__post_init__``.

    Subclasses set ``technique``, the short name used as the key of reports and telemetry.
    """

    technique: ClassVar[str] = "acceleration"

    def fields(self) -> dict[str, Any]:
        """The settings as a JSON-able dict (tuples become lists)."""
        return {f.name: _jsonable(getattr(self, f.name)) for f in dataclasses.fields(self)}

    def describe(self) -> dict[str, Any]:
        """``{"technique": ..., **fields}``: what telemetry and bench rows record."""
        return {"technique": self.technique, **self.fields()}


def _jsonable(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_jsonable(v) for v in value]
    return value


@dataclass
class AccelHandle:
    """What an ``apply`` returns: ``report`` (JSON-able, what was done) and ``state`` (private to
    the owning module: whatever its ``remove`` needs)."""

    report: dict[str, Any] = field(default_factory=dict)
    state: Any = None


ApplyFn = Callable[[Any, Any], AccelHandle]
RemoveFn = Callable[[Any, AccelHandle], None]


@dataclass(frozen=True)
class _Handler:
    config_type: type
    order: int
    apply: ApplyFn
    remove: RemoveFn | None
    reversible: bool | Callable[[Any], bool]


_HANDLERS: dict[type, _Handler] = {}


def register_acceleration(
    config_type: type,
    *,
    order: int,
    apply: ApplyFn,
    remove: RemoveFn | None = None,
    reversible: bool | Callable[[Any], bool] = True,
) -> None:
    """Register the handler of ``config_type`` (an :class:`AccelConfig` subclass).

    Args:
        order: position in the application order (lower first; unique per technique).
        apply: ``apply(components, config) -> AccelHandle``.
        remove: ``remove(components, handle)``, undoing ``apply``; required when reversible.
        reversible: ``True``/``False`` or a predicate on the config (FP8 is reversible only when
            it keeps the original weights).

    Re-registering the same type replaces its handler (a module reloaded in a notebook); another
    type at an order already taken is an error, so the order is never ambiguous.
    """
    if not (isinstance(config_type, type) and issubclass(config_type, AccelConfig)):
        raise TypeError(f"{config_type!r} is not an AccelConfig subclass")
    for other in _HANDLERS.values():
        if other.order == order and other.config_type.__qualname__ != config_type.__qualname__:
            raise ValueError(f"acceleration order {order} is taken by {other.config_type.__name__}")
    if remove is None and reversible is not False:
        raise ValueError(f"{config_type.__name__}: a reversible acceleration needs a remove function")
    # A reloaded module defines a new class object of the same name: drop the stale entry.
    for stale in [t for t in _HANDLERS if t.__qualname__ == config_type.__qualname__ and t.__module__ == config_type.__module__]:
        del _HANDLERS[stale]
    _HANDLERS[config_type] = _Handler(config_type, order, apply, remove, reversible)


def registered_accelerations() -> list[type]:
    """The registered config types, in application order."""
    return [h.config_type for h in sorted(_HANDLERS.values(), key=lambda h: h.order)]


def _handler(config: Any) -> _Handler:
    handler = _HANDLERS.get(type(config))
    if handler is None:
        known = ", ".join(t.__name__ for t in registered_accelerations())
        raise UnknownAccelerationError(
            f"{config!r} is not a registered acceleration config (registered: {known})"
        )
    return handler


def is_reversible(config: AccelConfig) -> bool:
    """Whether :func:`remove_accelerations` can undo ``config`` once applied (ask before applying)."""
    rev = _handler(config).reversible
    return bool(rev(config) if callable(rev) else rev)


def ordered(configs: Iterable[AccelConfig]) -> tuple[AccelConfig, ...]:
    """``configs`` in application order; two configs of one type are an error."""
    configs = tuple(configs)
    seen: dict[type, AccelConfig] = {}
    for c in configs:
        _handler(c)
        if type(c) in seen:
            raise AccelConfigError(f"two {type(c).__name__} configs given ({seen[type(c)]!r} and {c!r}); give one")
        seen[type(c)] = c
    return tuple(sorted(configs, key=lambda c: _handler(c).order))


@dataclass
class AppliedAccelerations:
    """The result of :func:`apply_accelerations`: each config with its handle, in the order
    applied. ``report`` is ``{technique: handle.report}``."""

    entries: list[tuple[AccelConfig, AccelHandle]] = field(default_factory=list)

    @property
    def configs(self) -> tuple[AccelConfig, ...]:
        return tuple(c for c, _ in self.entries)

    @property
    def report(self) -> dict[str, Any]:
        return {c.technique: dict(h.report) for c, h in self.entries}

    @property
    def reversible(self) -> bool:
        return all(is_reversible(c) for c, _ in self.entries)


def apply_accelerations(components: Any, configs: Sequence[AccelConfig]) -> AppliedAccelerations:
    """Apply ``configs`` to ``components`` in the registry's order (see the module docstring).

    If one fails, the ones already applied are removed again (where reversible) before the error
    propagates, so a failure does not leave a half-accelerated model behind when avoidable.
    """
    applied = AppliedAccelerations()
    for config in ordered(configs):
        try:
            handle = _handler(config).apply(components, config)
        except BaseException:
            _undo(components, [(c, h) for c, h in applied.entries if is_reversible(c)])
            raise
        if not isinstance(handle, AccelHandle):
            raise TypeError(f"{type(config).__name__}'s apply returned {type(handle).__name__}, not an AccelHandle")
        applied.entries.append((config, handle))
    return applied


def remove_accelerations(components: Any, applied: AppliedAccelerations) -> None:
    """Undo ``applied`` in reverse order. Refuses (before touching anything) when one of them is
    irreversible: :class:`IrreversibleAccelerationError` names it and what to do instead."""
    for config, _ in applied.entries:
        if not is_reversible(config):
            raise IrreversibleAccelerationError(
                f"{config!r} cannot be removed once applied (the original weights were not kept); "
                "reload the model, or apply it with a config that keeps them (e.g. Fp8Linears(keep_original=True))"
            )
    _undo(components, applied.entries)
    applied.entries.clear()


def _undo(components: Any, entries: list[tuple[AccelConfig, AccelHandle]]) -> None:
    for config, handle in reversed(entries):
        remove = _handler(config).remove
        assert remove is not None  # guaranteed for reversible configs by register_acceleration
        remove(components, handle)
