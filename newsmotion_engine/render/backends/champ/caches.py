"""The two ``champ`` sub-caches, in the format the Wan backends use (:mod:`..wan.artifacts`:
float32 ``.npy`` arrays in a :mod:`newsmotion_engine.cachedir` cache, validated, memory-mapped):

- **Guidance** (Tier 1, per loop) ``{guidance_cache}/champ/smpl-{model sha256[:12]}/``:
  ``pose.npy`` (the fitted SMPL joint rotations, axis-angle ``[T, 24, 3]``, :mod:`.fit`) and
  ``fit_error.npy`` (``[T]``, torso lengths). It depends on the loop and the SMPL file only, not
  on the diffusion weights or the render size; one folder per SMPL file, so two files never
  rebuild each other's.
- **Persona** (Tier 2) ``{persona_cache}/champ/{W}x{H}/``: ``ref_latents.npy`` (the reference
  frame's VAE latent mean x 0.18215, ``[1, 4, h/8, w/8]`` at the model's size) and
  ``clip_embeds.npy`` (CLIP's projected image embedding of the reference stretched to 224 x 224,
  ``[1, 1, D]``, the denoiser's cross-attention context), as the official pipeline prepares them.

The guidance maps themselves (depth / normal / semantic / skeleton) are not cached: they are
renders of the body placed on the retargeted keypoints, which depend on the persona; the backend
renders them per clip (:mod:`.maps`).

Staleness key (``params``): format version, the fit's settings and the SMPL file's sha256
(guidance); size, background, model identity digest (persona). Any difference ->
:class:`CacheStaleError` on read.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from newsmotion_engine import cachedir
from newsmotion_engine.cachedir import ArraySpec
from newsmotion_engine.render.backends.wan.artifacts import F32, as_tensor, check_shape, save_arrays

__all__ = [
    "GUIDANCE_SCHEMA",
    "PERSONA_SCHEMA",
    "FORMAT_VERSION",
    "BodyFit",
    "PersonaArtifacts",
    "guidance_artifacts_dir",
    "persona_artifacts_dir",
    "read_guidance_artifacts",
    "read_persona_artifacts",
    "write_guidance_artifacts",
    "write_persona_artifacts",
]

BACKEND_DIR = "champ"
FORMAT_VERSION = 1
VAE_SCALE = 8
GUIDANCE_SCHEMA = cachedir.CacheSchema(
    kind="champ-guidance", version=1,
    arrays={"pose.npy": ArraySpec(F32, (None, 24, 3)), "fit_error.npy": ArraySpec(F32, (None,))},
)  # fmt: skip
PERSONA_SCHEMA = cachedir.CacheSchema(
    kind="champ-persona", version=1,
    arrays={"ref_latents.npy": ArraySpec(F32, (1, 4, None, None)), "clip_embeds.npy": ArraySpec(F32, (1, 1, None))},
)  # fmt: skip


def guidance_artifacts_dir(guidance_path: Path, smpl_sha256: str, root: Path | None = None) -> Path:
    base = root / "guidance" / guidance_path.name if root else guidance_path
    return base / BACKEND_DIR / f"smpl-{smpl_sha256[:12]}"


def persona_artifacts_dir(persona_path: Path, width: int, height: int, root: Path | None = None) -> Path:
    base = root / "persona" / persona_path.name if root else persona_path
    return base / BACKEND_DIR / f"{width}x{height}"


@dataclass
class BodyFit:
    """A loop's fitted SMPL pose (numpy, memory-mapped as read)."""

    pose: np.ndarray  # [T, 24, 3]
    fit_error: np.ndarray  # [T]


@dataclass
class PersonaArtifacts:
    """The persona-side tensors (float32, CPU)."""

    ref_latents: Any  # [1, 4, h, w]
    clip_embeds: Any  # [1, 1, D]


def read_guidance_artifacts(cache_dir: Path, source: Mapping[str, Any], params: Mapping[str, Any], frames: int) -> BodyFit:
    """Validate the guidance sub-cache against ``source`` / ``params`` (and ``frames``) and map it.

    Raises:
        CacheMissingError / CacheStaleError / CacheCorruptError.
    """
    a = cachedir.read_cache(cache_dir, GUIDANCE_SCHEMA, expected_source=source, expected_params=params).arrays
    check_shape(cache_dir / "pose.npy", a["pose.npy"], (frames, 24, 3))
    check_shape(cache_dir / "fit_error.npy", a["fit_error.npy"], (frames,))
    return BodyFit(a["pose.npy"], a["fit_error.npy"])


def write_guidance_artifacts(cache_dir: Path, fit: BodyFit, *, source: Mapping[str, Any], params: Mapping[str, Any],
                             extra: Mapping[str, Any]) -> None:  # fmt: skip
    """Write the guidance sub-cache atomically (call under the cache's lock: :func:`cachedir.ensure`)."""
    cachedir.write_cache(cache_dir, lambda tmp: save_arrays(tmp, {"pose.npy": fit.pose, "fit_error.npy": fit.fit_error}),
                         schema=GUIDANCE_SCHEMA, source=source, params=params, extra=extra)  # fmt: skip


def read_persona_artifacts(cache_dir: Path, source: Mapping[str, Any], params: Mapping[str, Any],
                           model_width: int, model_height: int) -> PersonaArtifacts:  # fmt: skip
    """Validate the persona sub-cache (latents at the model's size) and load its tensors."""
    a = cachedir.read_cache(cache_dir, PERSONA_SCHEMA, expected_source=source, expected_params=params).arrays
    check_shape(cache_dir / "ref_latents.npy", a["ref_latents.npy"], (1, 4, model_height // VAE_SCALE, model_width // VAE_SCALE))
    return PersonaArtifacts(as_tensor(a["ref_latents.npy"]), as_tensor(a["clip_embeds.npy"]))


def write_persona_artifacts(cache_dir: Path, artifacts: PersonaArtifacts, *, source: Mapping[str, Any],
                            params: Mapping[str, Any], extra: Mapping[str, Any]) -> None:  # fmt: skip
    """Write the persona sub-cache atomically (call under the cache's lock: :func:`cachedir.ensure`)."""
    arrays = {"ref_latents.npy": artifacts.ref_latents, "clip_embeds.npy": artifacts.clip_embeds}
    cachedir.write_cache(cache_dir, lambda tmp: save_arrays(tmp, arrays), schema=PERSONA_SCHEMA, source=source,
                         params=params, extra=extra)  # fmt: skip
