"""Rendering: the backend protocol and registry, retargeting, the CPU ``warp`` backend and
``render_clip`` (persona x loop -> mp4 + :class:`RenderTelemetry`). ``render.job`` renders from ids.

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
from newsmotion_engine.render import warp as _warp  # noqa: F401  (registers "warp")
from newsmotion_engine.render import wan_animate as _wan_animate
from newsmotion_engine.render import wan_animate_2 as _wan_animate_2

_wan_animate.register()  # lazy: torch/diffusers load only when a wan-animate backend is created
_wan_animate_2.register()
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
