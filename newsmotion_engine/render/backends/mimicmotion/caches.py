"""The ``mimicmotion`` backend's sub-cache and its per-render pose frames.

**Persona** ``{persona_cache}/mimicmotion/{W}x{H}/`` (the render size; the arrays are at the native
size, e.g. 576 x 1024 for 720 x 1280), in the Wan backends' one format (:mod:`..wan.artifacts`:
float32 ``.npy`` arrays in a :mod:`newsmotion_engine.cachedir` cache, validated, memory-mapped),
what the official pipeline derives from the reference image:

- ``image_embeds.npy`` ``[1, 1, D]``: the CLIP image embedding (``image_embeds``: the projected
  pooled output) of the reference frame resized to 224 x 224 with diffusers' antialiased resize,
  then CLIP-normalised (the pipeline's ``_encode_image``);
- ``image_latents.npy`` ``[1, 4, h, w]``: the VAE latent distribution's mode of the reference frame
  in [-1, 1] (``_encode_vae_image``; not scaled, as SVD conditions on it), after
  ``noise_aug_strength`` x noise (0 in the released recipe);
- ``ref_pose.npy`` ``[3, H, W]``: the reference frame's pose frame in [-1, 1] (the official
  ``get_image_pose``): the persona's landmarks drawn by :mod:`.pose`.

The reference frame is the portrait composited over the render background, placed on the native
frame as every backend places it (:func:`~..wan.artifacts.reference_frame`).

**Guidance**: none. The driving pose frames depend on the persona (the loop retargeted to it, drawn
where its portrait sits), so they are drawn per render (:func:`pose_frames`; CPU), as wan-animate
draws its pose video; the loop's Tier-1 keypoints are what the render reads.

Staleness key (``params``): format version, render and native size, background, model identity,
noise augmentation (and the seed when it is on: the noise is drawn from the render's generator).
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

__all__ = ["FORMAT_VERSION", "PERSONA_SCHEMA", "PersonaArtifacts", "persona_artifacts_dir", "pose_frames",
           "read_persona_artifacts", "write_persona_artifacts"]  # fmt: skip

BACKEND_DIR = "mimicmotion"
FORMAT_VERSION = 1
PERSONA_SCHEMA = cachedir.CacheSchema(
    kind="mimicmotion-persona", version=1,
    arrays={"image_embeds.npy": ArraySpec(F32, (1, 1, None)), "image_latents.npy": ArraySpec(F32, (1, None, None, None)),
            "ref_pose.npy": ArraySpec(F32, (3, None, None))},
)  # fmt: skip


def persona_artifacts_dir(persona_path: Path, width: int, height: int, root: Path | None = None) -> Path:
    base = root / "persona" / persona_path.name if root else persona_path
    return base / BACKEND_DIR / f"{width}x{height}"


def pose_frames(persona: Any, keypoints: np.ndarray, width: int, height: int) -> np.ndarray:
    """uint8 ``[T, height, width, 3]``: ``keypoints`` (``[T, 133, 3]``, normalized to the persona's
    portrait) drawn in MimicMotion's training style (:mod:`.pose`) where the portrait sits on a
    ``width`` x ``height`` frame. The reference pose is the same call on the persona's landmarks."""
    from newsmotion_engine.render.backends.mimicmotion.pose import draw_mimicmotion_pose_video
    from newsmotion_engine.render.placement import place_portrait

    box = place_portrait(np.asarray(persona.portrait).shape[:2], width, height)
    return draw_mimicmotion_pose_video(keypoints, width, height, box=box)


def to_model_pixels(frames: np.ndarray):
    """uint8 ``[..., H, W, 3]`` -> float32 tensor ``[..., 3, H, W]`` in [-1, 1] (the official
    ``/ 127.5 - 1``)."""
    import torch

    t = torch.from_numpy(np.ascontiguousarray(frames)).float()
    return (t / 127.5 - 1.0).movedim(-1, -3)


@dataclass
class PersonaArtifacts:
    """The persona-side tensors of one (persona, size, background, model), float32 on the CPU."""

    image_embeds: Any  # [1, 1, D]
    image_latents: Any  # [1, 4, h, w]
    ref_pose: Any  # [3, H, W] in [-1, 1]


def read_persona_artifacts(cache_dir: Path, source: Mapping[str, Any], params: Mapping[str, Any],
                           width: int, height: int) -> PersonaArtifacts:  # fmt: skip
    """Validate the persona sub-cache against ``source`` / ``params`` (``params["native"]`` is the
    native size) and load its tensors.

    Raises:
        CacheMissingError / CacheStaleError / CacheCorruptError (from :mod:`cachedir`, or an array
        of the wrong shape).
    """
    a = cachedir.read_cache(cache_dir, PERSONA_SCHEMA, expected_source=source, expected_params=params).arrays
    nw, nh = params["native"]
    check_shape(cache_dir / "ref_pose.npy", a["ref_pose.npy"], (3, nh, nw))
    return PersonaArtifacts(as_tensor(a["image_embeds.npy"]), as_tensor(a["image_latents.npy"]), as_tensor(a["ref_pose.npy"]))


def write_persona_artifacts(cache_dir: Path, artifacts: PersonaArtifacts, *, source: Mapping[str, Any],
                            params: Mapping[str, Any], extra: Mapping[str, Any]) -> None:  # fmt: skip
    """Write the persona sub-cache atomically (call under the cache's lock: :func:`cachedir.ensure`)."""

    def build(tmp: Path) -> None:
        save_arrays(tmp, {"image_embeds.npy": artifacts.image_embeds, "image_latents.npy": artifacts.image_latents,
                          "ref_pose.npy": artifacts.ref_pose})  # fmt: skip

    cachedir.write_cache(cache_dir, build, schema=PERSONA_SCHEMA, source=source, params=params, extra=extra)
