"""The built-in render backends, one package each (``warp``, ``wan_animate``, ``wan_animate_2``),
and ``wan``: what the two Wan backends share (it is no backend itself).

A backend package exposes ``register()``, which adds it to the render registry
(:func:`newsmotion_engine.render.base.register_backend`) without importing its heavy dependencies.
Adding a backend is one new package here plus one line in :data:`BUILT_IN`.
"""

from __future__ import annotations

import importlib

__all__ = ["BUILT_IN", "register_built_in"]

BUILT_IN = (
    "warp",
    "wan_animate",
    "wan_animate_2",
    "scail_2",
    "mimicmotion",
    "echomimic_v3",
    "champ",
)


def register_built_in() -> None:
    """Register every package of :data:`BUILT_IN` (idempotent)."""
    for package in BUILT_IN:
        importlib.import_module(f"{__name__}.{package}").register()
