"""The ``scail-2`` sub-caches (one format module; the Wan backends' format, :mod:`..wan.artifacts`:
float32 ``.npy`` arrays written atomically with :mod:`newsmotion_engine.cachedir`, memory-mapped).

Sizes: the spec is ``W x H``; the model renders at ``w32 x h32`` = :func:`~.config.model_size`
(multiples of 32); latents are ``h = h32 / 8``, ``w = w32 / 8``; the driving inputs are at half that.

- **Tier 1, per (loop, spec size)** ``{guidance_cache}/scail-2/{W}x{H}/`` — everything persona-free:

  ``pose_latents.npy`` ``[S, 16, T_lat, h/2, w/2]``  per segment: VAE latents of the loop's driving
      clip (:mod:`newsmotion_engine.guidance.driver`, 24 fps, centre-cropped to the model size)
      resized to half size, as the official code encodes the driving video;
  ``driving_masks.npy`` ``[S, 28, T_lat, h/2, w/2]``  the driving person's matte as mask latents
      (:mod:`.masks`);
  ``prompt_embeds.npy`` / ``negative_embeds.npy`` ``[1, 512, D]``  UMT5 of the prompt and the
      negative prompt (the default prompt is persona-free).

- **Tier 2, per (persona, spec size, background)** ``{persona_cache}/scail-2/{W}x{H}/``:
  ``ref_latents.npy`` ``[16, 1, h, w]`` (the reference frame: the portrait over the background,
  placed as every backend places it, centre-cropped to the model size), ``ref_mask.npy``
  ``[28, 1, h, w]`` (the persona's matte placed the same way, as mask latents) and
  ``image_tokens.npy`` ``[1, 257, 1280]`` (CLIP of the reference frame).

Staleness (``params``): format version, size, segment plan, model identity, mode-independent
inputs only (the mode is a RoPE switch at render time), the prompts (Tier 1), the driving clip's
origin and digest (Tier 1), the background (Tier 2).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from newsmotion_engine import cachedir
from newsmotion_engine.cachedir import ArraySpec
from newsmotion_engine.render.backends.scail_2.config import model_size
from newsmotion_engine.render.backends.scail_2.masks import MASK_CHANNELS
from newsmotion_engine.render.backends.wan.artifacts import F32, check_shape, save_arrays
from newsmotion_engine.render.backends.wan.encoders import TEXT_TOKENS
from newsmotion_engine.render.backends.wan.segments import VAE_SCALE_SPATIAL, SegmentPlan

__all__ = [
    "FORMAT_VERSION",
    "GUIDANCE_SCHEMA",
    "PERSONA_SCHEMA",
    "GuidanceArtifacts",
    "PersonaArtifacts",
    "guidance_artifacts_dir",
    "latent_size",
    "persona_artifacts_dir",
    "read_guidance_artifacts",
    "read_persona_artifacts",
    "write_guidance_artifacts",
    "write_persona_artifacts",
]

BACKEND_DIR = "scail-2"
FORMAT_VERSION = 1
LATENT_CHANNELS = 16
GUIDANCE_SCHEMA = cachedir.CacheSchema(
    kind="scail-2-guidance",
    version=FORMAT_VERSION,
    arrays={
        "pose_latents.npy": ArraySpec(F32, (None, LATENT_CHANNELS, None, None, None)),
        "driving_masks.npy": ArraySpec(F32, (None, MASK_CHANNELS, None, None, None)),
        "prompt_embeds.npy": ArraySpec(F32, (1, TEXT_TOKENS, None)),
        "negative_embeds.npy": ArraySpec(F32, (1, TEXT_TOKENS, None)),
    },
)
PERSONA_SCHEMA = cachedir.CacheSchema(
    kind="scail-2-persona",
    version=FORMAT_VERSION,
    arrays={
        "ref_latents.npy": ArraySpec(F32, (LATENT_CHANNELS, 1, None, None)),
        "ref_mask.npy": ArraySpec(F32, (MASK_CHANNELS, 1, None, None)),
        "image_tokens.npy": ArraySpec(F32, (1, None, None)),
    },
)


@dataclass
class GuidanceArtifacts:
    """Tier 1 of one (loop, size, model): memory-mapped float32 arrays."""

    pose_latents: np.ndarray  # [S, 16, T_lat, h/2, w/2]
    driving_masks: np.ndarray  # [S, 28, T_lat, h/2, w/2]
    prompt_embeds: np.ndarray  # [1, 512, D]
    negative_embeds: np.ndarray  # [1, 512, D]


@dataclass
class PersonaArtifacts:
    """Tier 2 of one (persona, size, background, model)."""

    ref_latents: np.ndarray  # [16, 1, h, w]
    ref_mask: np.ndarray  # [28, 1, h, w]
    image_tokens: np.ndarray  # [1, 257, 1280]


def latent_size(width: int, height: int) -> tuple[int, int]:
    """``(h, w)``: the latent grid of a ``width`` x ``height`` spec (at the model size)."""
    mw, mh = model_size(width, height)
    return mh // VAE_SCALE_SPATIAL, mw // VAE_SCALE_SPATIAL


def guidance_artifacts_dir(guidance_path: Path, width: int, height: int, root: Path | None = None) -> Path:
    base = root / "guidance" / guidance_path.name if root else guidance_path
    return base / BACKEND_DIR / f"{width}x{height}"


def persona_artifacts_dir(persona_path: Path, width: int, height: int, root: Path | None = None) -> Path:
    base = root / "persona" / persona_path.name if root else persona_path
    return base / BACKEND_DIR / f"{width}x{height}"


def read_guidance_artifacts(cache_dir: Path, source: Mapping[str, Any], params: Mapping[str, Any], plan: SegmentPlan,
                            width: int, height: int) -> GuidanceArtifacts:  # fmt: skip
    """Validate Tier 1 against ``source`` / ``params`` and memory-map it (shapes checked against the
    plan and size). Raises the :mod:`cachedir` errors (missing / stale / corrupt)."""
    loaded = cachedir.read_cache(cache_dir, GUIDANCE_SCHEMA, expected_source=source, expected_params=params)
    a = loaded.arrays
    h, w = latent_size(width, height)
    for name, channels in (("pose_latents.npy", LATENT_CHANNELS), ("driving_masks.npy", MASK_CHANNELS)):
        check_shape(cache_dir / name, a[name], (plan.segments, channels, plan.latent_frames, h // 2, w // 2))
    return GuidanceArtifacts(a["pose_latents.npy"], a["driving_masks.npy"], a["prompt_embeds.npy"], a["negative_embeds.npy"])


def write_guidance_artifacts(cache_dir: Path, artifacts: GuidanceArtifacts, *, source: Mapping[str, Any],
                             params: Mapping[str, Any], extra: Mapping[str, Any]) -> None:  # fmt: skip
    """Write Tier 1 atomically (under the cache's lock: :func:`cachedir.ensure`)."""

    def build(tmp: Path) -> None:
        save_arrays(tmp, {"pose_latents.npy": artifacts.pose_latents, "driving_masks.npy": artifacts.driving_masks,
                          "prompt_embeds.npy": artifacts.prompt_embeds, "negative_embeds.npy": artifacts.negative_embeds})  # fmt: skip

    cachedir.write_cache(cache_dir, build, schema=GUIDANCE_SCHEMA, source=source, params=params, extra=extra)


def read_persona_artifacts(cache_dir: Path, source: Mapping[str, Any], params: Mapping[str, Any],
                           width: int, height: int) -> PersonaArtifacts:  # fmt: skip
    loaded = cachedir.read_cache(cache_dir, PERSONA_SCHEMA, expected_source=source, expected_params=params)
    a = loaded.arrays
    h, w = latent_size(width, height)
    check_shape(cache_dir / "ref_latents.npy", a["ref_latents.npy"], (LATENT_CHANNELS, 1, h, w))
    check_shape(cache_dir / "ref_mask.npy", a["ref_mask.npy"], (MASK_CHANNELS, 1, h, w))
    return PersonaArtifacts(a["ref_latents.npy"], a["ref_mask.npy"], a["image_tokens.npy"])


def write_persona_artifacts(cache_dir: Path, artifacts: PersonaArtifacts, *, source: Mapping[str, Any],
                            params: Mapping[str, Any], extra: Mapping[str, Any]) -> None:  # fmt: skip
    def build(tmp: Path) -> None:
        save_arrays(tmp, {"ref_latents.npy": artifacts.ref_latents, "ref_mask.npy": artifacts.ref_mask,
                          "image_tokens.npy": artifacts.image_tokens})  # fmt: skip

    cachedir.write_cache(cache_dir, build, schema=PERSONA_SCHEMA, source=source, params=params, extra=extra)
