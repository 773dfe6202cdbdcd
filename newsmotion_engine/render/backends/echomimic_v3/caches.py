"""The ``echomimic-v3`` sub-cache (one format module; the Wan backends' format,
:mod:`..wan.artifacts`: float32 ``.npy`` in a :mod:`newsmotion_engine.cachedir` cache, validated
and memory-mapped).

The model is driven by audio, not by a loop's pose, so it has no Tier-1 (loop) artifacts; the
speech's audio features are the speech tier's own sub-cache (``speech/features.py``).

**Tier 2, per (persona, render size, background, model, prompt)** ``{persona_cache}/echomimic-v3/{W}x{H}/``,
all at the model's size (:meth:`~.config.EchoMimicV3Options.model_size`):

``first_condition.npy`` ``[20, T_lat, h, w]``  the first segment's conditioning, as the official
    ``get_image_to_video_latent2`` + pipeline build it: the i2v mask (video frame 0 known) stacked
    on the VAE latents of the reference frame followed by ``segment_frames - 1`` zero frames. The
    Wan VAE is causal, so a shorter segment's conditioning is this one's first latent frames;
``image_tokens.npy`` ``[1, N, 1280]``  CLIP features of the reference frame;
``prompt_embeds.npy`` ``[1, 512, D]``  UMT5 of the prompt.

Staleness (``params``): format version, render and model size, segment length, background, model
identity, prompt, the persona cache's source sha256.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from newsmotion_engine import cachedir
from newsmotion_engine.cachedir import ArraySpec
from newsmotion_engine.render.backends.wan.artifacts import F32, check_shape, save_arrays

__all__ = ["FORMAT_VERSION", "PERSONA_SCHEMA", "PersonaArtifacts", "persona_artifacts_dir", "read_persona_artifacts",
           "write_persona_artifacts"]  # fmt: skip

BACKEND_DIR = "echomimic-v3"
FORMAT_VERSION = 1
TEXT_TOKENS = 512
VAE_SCALE = 8
PERSONA_SCHEMA = cachedir.CacheSchema(
    kind="echomimic-v3-persona",
    version=FORMAT_VERSION,
    arrays={"first_condition.npy": ArraySpec(F32, (20, None, None, None)), "image_tokens.npy": ArraySpec(F32, (1, None, None)),
            "prompt_embeds.npy": ArraySpec(F32, (1, TEXT_TOKENS, None))},  # fmt: skip
)


@dataclass
class PersonaArtifacts:
    """Tier 2 of one (persona, size, background, model, prompt): memory-mapped float32 arrays."""

    first_condition: np.ndarray  # [20, T_lat, h, w]
    image_tokens: np.ndarray  # [1, N, 1280]
    prompt_embeds: np.ndarray  # [1, 512, D]


def persona_artifacts_dir(persona_path: Path, width: int, height: int, root: Path | None = None) -> Path:
    base = root / "persona" / persona_path.name if root else persona_path
    return base / BACKEND_DIR / f"{width}x{height}"


def read_persona_artifacts(cache_dir: Path, source: Mapping[str, Any], params: Mapping[str, Any], width: int = 0,
                           height: int = 0) -> PersonaArtifacts:  # fmt: skip
    """Validate against ``source`` / ``params`` and memory-map (shapes checked against the model
    size and segment length in ``params``; ``width`` / ``height``, the render size the base class
    passes, are in ``params`` too). Raises the :mod:`cachedir` errors."""
    loaded = cachedir.read_cache(cache_dir, PERSONA_SCHEMA, expected_source=source, expected_params=params)
    w, h = params["model_size"]
    t = (params["segment_frames"] - 1) // 4 + 1
    first = loaded.arrays["first_condition.npy"]
    check_shape(cache_dir / "first_condition.npy", first, (20, t, h // VAE_SCALE, w // VAE_SCALE))
    return PersonaArtifacts(first, loaded.arrays["image_tokens.npy"], loaded.arrays["prompt_embeds.npy"])


def write_persona_artifacts(cache_dir: Path, artifacts: PersonaArtifacts, *, source: Mapping[str, Any],
                            params: Mapping[str, Any], extra: Mapping[str, Any]) -> None:  # fmt: skip
    """Write Tier 2 atomically (under the cache's lock: :func:`cachedir.ensure`)."""

    def build(tmp: Path) -> None:
        save_arrays(tmp, {"first_condition.npy": artifacts.first_condition, "image_tokens.npy": artifacts.image_tokens,
                    "prompt_embeds.npy": artifacts.prompt_embeds})  # fmt: skip

    cachedir.write_cache(cache_dir, build, schema=PERSONA_SCHEMA, source=source, params=params, extra=extra)
