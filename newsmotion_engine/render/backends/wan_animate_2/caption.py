"""The text prompt of a wan-animate-2 render when none is configured: a caption of the persona's
appearance and the background, which is what Wan-Animate-2's prompt describes (the motion comes
from the driving video, not the text).

What a persona cache knows about its person is structural only (no face or clothing description
is extracted): which parts are visible (``visible_parts``: a waist-up or a head-and-shoulders
portrait), that it is a single person facing the camera (the persona builder refuses others), and
the render's background colour. The caption says that and no more, so it never invents an
appearance; a better description is the ``prompt`` option.

Persona-dependent, so its embedding lives in the persona's Tier-2 sub-cache (see ``caches``).

Example::

    persona_caption(persona, (0, 177, 64))
    # 'a news presenter, waist-up, facing the camera and speaking, in a studio, in front of a
    #  plain green background'
"""

from __future__ import annotations

from typing import Any

__all__ = ["colour_name", "persona_caption", "shot_name"]

_NAMED = {
    "green": (0, 177, 64),
    "blue": (0, 71, 187),
    "white": (255, 255, 255),
    "black": (0, 0, 0),
    "grey": (128, 128, 128),
}


def colour_name(rgb: tuple[int, int, int]) -> str:
    """The nearest plain colour name (``green`` for chroma green, ``blue`` for chroma blue...)."""
    r, g, b = (int(c) for c in rgb)
    return min(_NAMED, key=lambda n: sum((a - c) ** 2 for a, c in zip(_NAMED[n], (r, g, b))))


def shot_name(visible_parts: list[str] | None) -> str:
    """How much of the person the portrait shows, from the persona's visible parts."""
    parts = set(visible_parts or ())
    if "feet" in parts:
        return "full-length"
    if "left_hand" in parts or "right_hand" in parts:
        return "waist-up, hands visible"
    if "body" in parts:
        return "waist-up"
    return "head and shoulders"


def persona_caption(persona: Any, background: tuple[int, int, int]) -> str:
    """The caption of ``persona`` (a loaded persona cache; its ``metadata['visible_parts']`` is
    read when present) rendered over ``background``."""
    meta = getattr(persona, "metadata", None) or {}
    shot = shot_name(meta.get("visible_parts"))
    return (f"a news presenter, {shot}, facing the camera and speaking, in a studio, "
            f"in front of a plain {colour_name(background)} background")  # fmt: skip
