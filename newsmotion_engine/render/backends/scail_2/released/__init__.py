"""SCAIL-2's released configs, kept as facts (no weights): ``scail-2-14b/transformer/config.json``
(the official DiT config, official key names) and ``scail-2-14b/scheduler/scheduler_config.json``
(its sampler as diffusers writes it). Each file's ``_source`` says where it came from;
``tests/engine/render/backends/scail_2/test_released.py`` builds the DiT from it on the meta device
and pins its parameter count and state-dict keys."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

__all__ = ["RELEASE", "official_kwargs", "released_config", "transformer_kwargs"]

RELEASE = Path(__file__).parent / "scail-2-14b"
_NOT_KWARGS = {"model_type"}  # the official constructor's variant switch: SCAIL-2 is always "i2v"


@cache
def released_config(relative: str) -> dict[str, Any]:
    """One released file (``relative`` to the release folder), as stored."""
    return json.loads((RELEASE / relative).read_text())


def official_kwargs(config: dict[str, Any]) -> dict[str, Any]:
    """Our transformer's constructor kwargs from an official ``config.json`` (comment and class
    fields and ``model_type`` dropped; the other names are the same)."""
    return {k: v for k, v in config.items() if not k.startswith("_") and k not in _NOT_KWARGS}


def transformer_kwargs() -> dict[str, Any]:
    """The released DiT's constructor kwargs."""
    return official_kwargs(released_config("transformer/config.json"))
