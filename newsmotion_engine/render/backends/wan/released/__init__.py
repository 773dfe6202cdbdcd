"""The released diffusers checkpoints' configs, kept in the repo as facts (no weights): one folder
per release, laid out like the checkpoint (``transformer/config.json``, ``vae/config.json``,
``image_encoder/config.json``, ``text_encoder/config.json``, ``scheduler/scheduler_config.json``,
the pipeline index). ``README.md`` beside this file says where each file came from.

``tests/engine/render/backends/wan/test_released_configs.py`` instantiates each component on the meta device
from these files the way ``from_pretrained`` reads a config (``from_config``, no unused keys),
pins its parameter count, and checks that the ``14b`` presets build exactly these architectures
(the same state-dict keys and shapes), so a preset cannot drift from the release.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

__all__ = ["RELEASES", "component_kwargs", "released_config", "released_dir"]

# backend -> (folder here, the Hugging Face repository it describes)
RELEASES: dict[str, tuple[str, str]] = {
    "wan-animate": ("wan2.2-animate-14b", "Wan-AI/Wan2.2-Animate-14B-Diffusers"),
    "wan-animate-2": ("wan2.2-animate-2-14b", "Wan-AI/Wan2.2-Animate-2-14B-Diffusers"),
}
_ROOT = Path(__file__).parent


def released_dir(backend: str) -> Path:
    """The folder of ``backend``'s released configs."""
    return _ROOT / RELEASES[backend][0]


@cache
def _read(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def released_config(backend: str, relative: str) -> dict[str, Any]:
    """One released config file (``relative`` to the release folder, e.g. ``"vae/config.json"``), as stored."""
    return dict(_read(released_dir(backend) / relative))


def component_kwargs(backend: str, component: str) -> dict[str, Any]:
    """Constructor kwargs of a component (``transformer``, ``vae``, ``image_encoder``,
    ``text_encoder``) from its released config: the file's keys without the ``_``-prefixed
    bookkeeping (and, for the transformers configs, without ``architectures`` / ``dtype``)."""
    config = released_config(backend, f"{component}/config.json")
    drop = {"architectures", "dtype", "transformers_version", "model_type"}
    return {k: v for k, v in config.items() if not k.startswith("_") and k not in drop}
