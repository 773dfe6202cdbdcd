"""The released audio-encoder configs, kept in the repo as facts (no weights): ``wav2vec2-base/``
holds ``config.json`` and ``preprocessor_config.json``; ``README.md`` says where they came from."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

WAV2VEC2_BASE = Path(__file__).parent / "wav2vec2-base"


def released_json(name: str) -> dict[str, Any]:
    """One file of the wav2vec2-base release (``"config.json"`` or ``"preprocessor_config.json"``)."""
    return json.loads((WAV2VEC2_BASE / name).read_text())
