"""The two ``wan-animate`` sub-caches, in the Wan backends' one format (:mod:`..wan.artifacts`:
float32 ``.npy`` arrays in a :mod:`newsmotion_engine.cachedir` cache, validated, memory-mapped):

- **Persona** ``{persona_cache}/wan-animate/{W}x{H}/``: ``ref_latents.npy`` (the reference
  image's VAE latents with the 4 i2v mask channels, ``[1, 20, 1, H/8, W/8]``) and
  ``image_tokens.npy`` (CLIP penultimate hidden states of the whole reference frame stretched to
  224 x 224, as Wan preprocesses it: :func:`~..wan.encoders.encode_image_tokens`; ``[1, N, D]``).
  The reference image is the portrait composited over the render background and placed on the
  W x H frame as every backend places it.
- **Guidance** ``{guidance_cache}/wan-animate/{W}x{H}/``: ``cond0_latents.npy`` (the first
  segment's conditioning: the all-zero video's latents with a zero mask), ``prompt_embeds.npy`` and
  ``negative_embeds.npy`` (UMT5 embeddings, ``[1, 512, D]``).

Pose video: not cached. As in Wan's animation mode (the driving pose retargeted to the reference,
drawn on a canvas of the reference's size), it is the clip's retargeted keypoints drawn in Wan's
training style (:mod:`newsmotion_engine.guidance.wan_pose`) where :func:`~newsmotion_engine.render.backends.wan.artifacts.reference_frame` places
the portrait (:func:`pose_frames`), so it depends on the persona: the backend VAE-encodes it per
render (:func:`encode_pose_latents`, once per inference segment). Segments past the clip's end
continue it cyclically (the loops are seamless), where the stock pipeline reflects.

Staleness key (``params``): format version, resolution, segment plan, model identity digest, the
parent cache's source sha256 (and the prompt / background that went in). Any difference ->
:class:`CacheStaleError` on read. Reading is this module's :func:`read_guidance_artifacts` /
:func:`read_persona_artifacts` (validated metadata and arrays, then the shapes the plan fixes); writing
is :func:`write_guidance_artifacts` / :func:`write_persona_artifacts` (atomic, via
:func:`cachedir.write_cache`). The backend's ``prepare_guidance`` / ``prepare_persona`` combine
them through :func:`cachedir.ensure` (the double-checked read-or-build); its render path only reads.
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
from newsmotion_engine.render.backends.wan.encoders import TEXT_TOKENS, to_video_tensor, vae_encode
from newsmotion_engine.render.backends.wan.segments import VAE_SCALE_SPATIAL, SegmentPlan

__all__ = [
    "GUIDANCE_SCHEMA",
    "PERSONA_SCHEMA",
    "GuidanceArtifacts",
    "encode_pose_latents",
    "PersonaArtifacts",
    "guidance_artifacts_dir",
    "persona_artifacts_dir",
    "pose_frames",
    "read_guidance_artifacts",
    "read_persona_artifacts",
    "write_guidance_artifacts",
    "write_persona_artifacts",
]

BACKEND_DIR = "wan-animate"
FORMAT_VERSION = 1
# 2: CLIP sees the whole reference frame stretched to 224 x 224 (was centre-cropped);
# 3: .npy arrays, the Wan backends' one sub-cache format (were safetensors). Older ones are rebuilt.
PERSONA_SCHEMA_VERSION = 3
PERSONA_SCHEMA = cachedir.CacheSchema(
    kind="wan-animate-persona", version=PERSONA_SCHEMA_VERSION,
    arrays={"ref_latents.npy": ArraySpec(F32, (1, 20, 1, None, None)), "image_tokens.npy": ArraySpec(F32, (1, None, None))},
)  # fmt: skip
# 2: the pose latents left the guidance sub-cache (encoded per render); 3: .npy arrays. Older ones are rebuilt.
GUIDANCE_SCHEMA_VERSION = 3
GUIDANCE_SCHEMA = cachedir.CacheSchema(
    kind="wan-animate-guidance", version=GUIDANCE_SCHEMA_VERSION,
    arrays={"cond0_latents.npy": ArraySpec(F32, (1, 20, None, None, None)),
            "prompt_embeds.npy": ArraySpec(F32, (1, TEXT_TOKENS, None)),
            "negative_embeds.npy": ArraySpec(F32, (1, TEXT_TOKENS, None))},
)  # fmt: skip


def persona_artifacts_dir(persona_path: Path, width: int, height: int, root: Path | None = None) -> Path:
    base = root / "persona" / persona_path.name if root else persona_path
    return base / BACKEND_DIR / f"{width}x{height}"


def guidance_artifacts_dir(guidance_path: Path, width: int, height: int, root: Path | None = None,
                           keyframes: int = 1) -> Path:  # fmt: skip
    """``{guidance}/wan-animate/{W}x{H}`` (``{W}x{H}-k{N}`` for the pose video of 1:N keyframes)."""
    base = root / "guidance" / guidance_path.name if root else guidance_path
    return base / BACKEND_DIR / (f"{width}x{height}" if keyframes == 1 else f"{width}x{height}-k{keyframes}")


def pose_frames(persona: Any, keypoints: np.ndarray, width: int, height: int) -> np.ndarray:
    """The pose video of a clip: uint8 ``[T, height, width, 3]``, ``keypoints`` (``[T, 133, 3]``,
    retargeted to the persona: normalized to its portrait) drawn in Wan-Animate's training style
    where :func:`~newsmotion_engine.render.backends.wan.artifacts.reference_frame` places the portrait, so the skeleton lies on the reference
    person and keeps its proportions at any output aspect ratio. The backend and the GPU benches'
    stock side both draw through this."""
    from newsmotion_engine.guidance.wan_pose import draw_wan_pose_video
    from newsmotion_engine.render.placement import place_portrait

    box = place_portrait(np.asarray(persona.portrait).shape[:2], width, height)
    return draw_wan_pose_video(keypoints, width, height, box=box)


def encode_pose_latents(vae: Any, frames: np.ndarray, plan: SegmentPlan, device: Any):
    """One VAE encoding per inference segment of ``plan`` of the pose video ``frames`` (uint8
    ``[T, H, W, 3]``; segment ``k`` covers frames ``plan.start(k) ...``, cyclically past the end)
    -> float32 ``[S, 16, T_lat, H/8, W/8]`` on the CPU."""
    import torch

    n = int(frames.shape[0])
    out = []
    for k in range(plan.segments):
        idx = [(plan.start(k) + j) % n for j in range(plan.segment_frames)]
        out.append(vae_encode(vae, to_video_tensor(frames[idx]), device))
    return torch.cat(out)


@dataclass
class GuidanceArtifacts:
    """The loop-side tensors of one (loop, resolution, model), float32 on the CPU, and the clip's
    pose latents: ``None`` as read from the sub-cache, filled per render by the backend's
    ``plan_clip`` (:func:`encode_pose_latents`; the pose video depends on the persona)."""

    cond0_latents: Any  # [1, 20, T_lat, h, w]: mask + latents of the all-zero video (first segment)
    prompt_embeds: Any  # [1, 512, D_text]
    negative_embeds: Any  # [1, 512, D_text]
    pose_latents: Any = None  # [S, 16, T_lat, h, w]: one VAE encoding of the pose video per segment


@dataclass
class PersonaArtifacts:
    """The persona-side tensors of one (persona, resolution, background, model), float32 on the CPU."""

    ref_latents: Any  # [1, 20, 1, h, w]: i2v mask + the reference image's latents
    image_tokens: Any  # [1, N, D_img]: CLIP penultimate hidden states


def read_guidance_artifacts(cache_dir: Path, source: Mapping[str, Any], params: Mapping[str, Any], plan: SegmentPlan,
                            width: int, height: int) -> GuidanceArtifacts:  # fmt: skip
    """Validate the guidance sub-cache against ``source`` / ``params`` and load its tensors.

    Raises:
        CacheMissingError / CacheStaleError / CacheCorruptError (from :mod:`cachedir`, or an array
        of the wrong shape).
    """
    a = cachedir.read_cache(cache_dir, GUIDANCE_SCHEMA, expected_source=source, expected_params=params).arrays
    h, w, t = height // VAE_SCALE_SPATIAL, width // VAE_SCALE_SPATIAL, plan.latent_frames
    check_shape(cache_dir / "cond0_latents.npy", a["cond0_latents.npy"], (1, 20, t, h, w))
    return GuidanceArtifacts(as_tensor(a["cond0_latents.npy"]), as_tensor(a["prompt_embeds.npy"]), as_tensor(a["negative_embeds.npy"]))


def write_guidance_artifacts(cache_dir: Path, artifacts: GuidanceArtifacts, *, source: Mapping[str, Any],
                             params: Mapping[str, Any], extra: Mapping[str, Any]) -> None:  # fmt: skip
    """Write the guidance sub-cache atomically (call under the cache's lock: :func:`cachedir.ensure`)."""

    def build(tmp: Path) -> None:
        save_arrays(tmp, {"cond0_latents.npy": artifacts.cond0_latents, "prompt_embeds.npy": artifacts.prompt_embeds,
                          "negative_embeds.npy": artifacts.negative_embeds})  # fmt: skip

    cachedir.write_cache(cache_dir, build, schema=GUIDANCE_SCHEMA, source=source, params=params, extra=extra)


def read_persona_artifacts(cache_dir: Path, source: Mapping[str, Any], params: Mapping[str, Any],
                           width: int, height: int) -> PersonaArtifacts:  # fmt: skip
    """Validate the persona sub-cache against ``source`` / ``params`` and load its tensors."""
    a = cachedir.read_cache(cache_dir, PERSONA_SCHEMA, expected_source=source, expected_params=params).arrays
    check_shape(cache_dir / "ref_latents.npy", a["ref_latents.npy"], (1, 20, 1, height // VAE_SCALE_SPATIAL, width // VAE_SCALE_SPATIAL))
    return PersonaArtifacts(as_tensor(a["ref_latents.npy"]), as_tensor(a["image_tokens.npy"]))


def write_persona_artifacts(cache_dir: Path, artifacts: PersonaArtifacts, *, source: Mapping[str, Any],
                            params: Mapping[str, Any], extra: Mapping[str, Any]) -> None:  # fmt: skip
    """Write the persona sub-cache atomically (call under the cache's lock: :func:`cachedir.ensure`)."""

    def build(tmp: Path) -> None:
        save_arrays(tmp, {"ref_latents.npy": artifacts.ref_latents, "image_tokens.npy": artifacts.image_tokens})

    cachedir.write_cache(cache_dir, build, schema=PERSONA_SCHEMA, source=source, params=params, extra=extra)
