"""Rendering: the backend protocol and registry, retargeting and ``render_clip`` (persona x loop
-> mp4 + :class:`RenderTelemetry`); ``render.job`` renders from ids. The backends are packages
under ``render.backends``.

Importing this package registers the built-in backends (``available_backends()`` lists them).
"""

from newsmotion_engine.render.base import (
    BACKGROUND_CHROMA_GREEN,
    Backend,
    BackendCacheError,
    BackendNeeds,
    BackendOptionError,
    BackendOptions,
    InvalidSpecError,
    RenderSpec,
    UnknownBackendError,
    available_backends,
    get_backend,
    register_backend,
    validate_options,
)
from newsmotion_engine.render.retarget import retarget
from newsmotion_engine.render.backends import register_built_in

register_built_in()  # lazy: torch/diffusers load only when a Wan backend is created
from newsmotion_engine.render.clip import render_clip
from newsmotion_engine.render.telemetry import RenderProvenance, RenderTelemetry

__all__ = [
    "BACKGROUND_CHROMA_GREEN",
    "Backend",
    "BackendCacheError",
    "BackendNeeds",
    "BackendOptionError",
    "BackendOptions",
    "InvalidSpecError",
    "RenderProvenance",
    "RenderSpec",
    "RenderTelemetry",
    "UnknownBackendError",
    "available_backends",
    "get_backend",
    "register_backend",
    "render_clip",
    "retarget",
    "validate_options",
]
