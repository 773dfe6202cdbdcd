"""Tier-2 appearance: a persona's portrait normalized once (canvas, mattes, landmarks) and cached
for memory-mapped loads at render time. See :mod:`newsmotion_engine.persona.cache` for the format,
:mod:`newsmotion_engine.persona.build` for how a portrait becomes one.

Importing this package does not import mediapipe (builds import it when they run).
"""

from newsmotion_engine.persona.build import ensure_persona
from newsmotion_engine.persona.cache import (
    PERSONA_VERSION,
    SCHEMA,
    PersonaCache,
    image_source,
    list_persona_ids,
    load_persona,
    persona_params,
    persona_problems,
    persona_source_image,
    persona_status,
)
from newsmotion_engine.persona.image import CANVAS_HEIGHT, CANVAS_WIDTH, PIXEL_LIMIT, load_portrait
from newsmotion_engine.persona.preview import write_preview

__all__ = [
    "CANVAS_HEIGHT",
    "CANVAS_WIDTH",
    "PERSONA_VERSION",
    "PIXEL_LIMIT",
    "SCHEMA",
    "PersonaCache",
    "ensure_persona",
    "image_source",
    "list_persona_ids",
    "load_persona",
    "load_portrait",
    "persona_params",
    "persona_problems",
    "persona_source_image",
    "persona_status",
    "write_preview",
]
