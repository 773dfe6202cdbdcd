"""Ids for loops and personas are slugs, so no id can escape its folder or clash by case."""

from __future__ import annotations

import re
import unicodedata

from newsmotion_engine.errors import InvalidIdError

SLUG_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
# Names Windows refuses as file names; refused everywhere so a storage folder can be shared.
RESERVED = {"con", "prn", "aux", "nul", *(f"com{i}" for i in range(1, 10)), *(f"lpt{i}" for i in range(1, 10))}


def validate_id(value: str, what: str = "id") -> str:
    """Return ``value`` if it is a valid slug (``[a-z0-9][a-z0-9_-]{0,63}``), else raise
    :class:`InvalidIdError` explaining the rule."""
    if not isinstance(value, str) or not SLUG_RE.match(value) or value in RESERVED:
        shown = repr(value if not isinstance(value, str) or len(value) <= 80 else value[:77] + "...")
        raise InvalidIdError(
            f"invalid {what} {shown}: use 1-64 characters of a-z, 0-9, '_' or '-', starting with a "
            "letter or digit (reserved device names like 'con' are refused)"
        )
    return value


def slugify(name: str) -> str | None:
    """Best-effort slug from a file stem (``"Jane Doe (2).PNG"`` -> ``"jane-doe-2"``); ``None`` when
    nothing usable remains. Accents are folded to ASCII; other characters become ``-``."""
    folded = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode("ascii").lower()
    slug = re.sub(r"[^a-z0-9_]+", "-", folded).strip("-_")[:64].rstrip("-_")
    if not slug or not SLUG_RE.match(slug):
        return None
    if slug in RESERVED:
        slug = f"{slug}-1"
    return slug
