"""Where each studio page lives, relative to the site root (``storage.studio_dir``): the one place
that spells the site's layout, shared by the build and the Dagster assets' links."""

from __future__ import annotations

__all__ = ["ab_page", "pair_dir", "render_page"]


def render_page(persona_id: str, loop_id: str, backend: str) -> str:
    """A render's page, relative to the site root."""
    return f"render/{persona_id}/{loop_id}/{backend}.html"


def ab_page(persona_id: str, loop_id: str, a: str, b: str) -> str:
    """The A/B page of two backends' renders, relative to the site root."""
    return f"ab/{persona_id}/{loop_id}/{a}.vs.{b}.html"


def pair_dir(persona_id: str, loop_id: str, a: str, b: str) -> str:
    """Where an A/B pair's heatmap clip and comparison record live, relative to the site root."""
    return f"ab/{persona_id}/{loop_id}/{a}.vs.{b}"
