"""Accelerations that switch a setting on in every matching layer of named components.

Channels-last weights (:mod:`.memory_format`), 3-D convolutions by 2-D ones (:mod:`.conv3d`) and
the Wan convolutions' folded padding (:mod:`.causal_pad`) share one shape: a config with a
``modules`` tuple (component attribute names; empty: every ``torch.nn.Module`` attribute holding
a matching layer), a function that switches one module's layers on or off and says how many it
touched, and a report ``{"modules": {name: count}}``.
:func:`register_module_toggle` registers that apply / remove pair for a config type.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from newsmotion_engine.accel.registry import AccelConfig, AccelConfigError, AccelHandle, register_acceleration

__all__ = ["ModuleToggleConfig", "check_module_names", "modules_holding", "register_module_toggle", "wrap_processors"]


def check_module_names(technique: str, modules: Any) -> None:
    """Refuse a ``modules`` field that is not a tuple of non-empty names (a config's ``__post_init__``)."""
    if isinstance(modules, str) or not all(isinstance(m, str) and m for m in modules):
        raise AccelConfigError(f"{technique} modules {modules!r}: give a tuple of component attribute names")


@dataclass(frozen=True)
class ModuleToggleConfig(AccelConfig):
    """Base of these configs: ``modules``, component attribute names to change; empty: every
    module holding a matching layer."""

    modules: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        check_module_names(self.technique, self.modules)


def modules_holding(components: Any, holds: Callable[[torch.nn.Module], bool]) -> list[str]:
    """The components' attributes that are modules with a layer for which ``holds`` is true."""
    return [name for name, value in vars(components).items()
            if isinstance(value, torch.nn.Module) and any(holds(m) for m in value.modules())]  # fmt: skip


def wrap_processors(module: torch.nn.Module, on: bool, holds: Callable[[torch.nn.Module], bool], wrapper: type) -> int:
    """Wrap (``on``) the attention processor of every layer of ``module`` that ``holds`` accepts in
    ``wrapper(processor)``, or put back the ``inner`` processor of every layer holding a
    ``wrapper``; how many layers changed (the processor-wrapping toggles' switch)."""
    n = 0
    for m in module.modules():
        if on and holds(m):
            m.set_processor(wrapper(m.processor))
            n += 1
        elif not on and isinstance(getattr(m, "processor", None), wrapper):
            m.set_processor(m.processor.inner)
            n += 1
    return n


def register_module_toggle(config_type: type[AccelConfig], *, order: int, holds: Callable[[torch.nn.Module], bool],
                           switch: Callable[[torch.nn.Module, bool], int]) -> None:  # fmt: skip
    """Register ``config_type`` (with a ``modules`` field) at ``order``: apply runs ``switch(module,
    True)`` on each named (or, none named, each :func:`modules_holding`) component, remove runs
    ``switch(module, False)`` on the same ones."""
    technique = config_type.technique

    def switch_all(components: Any, names: list[str], on: bool) -> dict[str, int]:
        counts = {}
        for name in names:
            module = getattr(components, name, None)
            if not isinstance(module, torch.nn.Module):
                raise AccelConfigError(f"{technique}: the components have no module {name!r}")
            counts[name] = switch(module, on)
        return counts

    def apply(components: Any, config: Any) -> AccelHandle:
        names = list(config.modules) or modules_holding(components, holds)
        return AccelHandle(report={"modules": switch_all(components, names, True)}, state=names)

    def remove(components: Any, handle: AccelHandle) -> None:
        switch_all(components, handle.state, False)

    register_acceleration(config_type, order=order, apply=apply, remove=remove)
