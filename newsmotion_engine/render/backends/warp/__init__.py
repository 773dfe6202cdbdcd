"""The ``warp`` backend: CPU, no weights (:mod:`.warp`); the arm layers it cuts and poses
(:mod:`.limbs`) are deformed as-rigid-as-possible (:mod:`.arap`); with speech, the face talks
(:mod:`.face_motion`: blinks and head motion; :mod:`.mouth`: the mouth's shapes)."""

from __future__ import annotations

__all__ = ["NAME", "register"]

NAME = "warp"


def register() -> None:
    """Register ``warp`` in the render backend registry (idempotent)."""
    from newsmotion_engine.render.backends.warp.warp import WarpBackend, WarpOptions
    from newsmotion_engine.render.base import register_backend

    register_backend(NAME, WarpBackend, options=WarpOptions)
