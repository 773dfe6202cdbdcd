"""The ``wan-animate-2`` sub-caches (one format module; written with :mod:`newsmotion_engine.cachedir`,
arrays memory-mapped on load).

The format is the one both Wan backends use (:mod:`..wan.artifacts`): float32 ``.npy`` arrays,
validated and memory-mapped.

- **Tier 1, per (loop, resolution)** ``{guidance_cache}/wan-animate-2/{W}x{H}/`` — the inputs of
  every segment's reference-extraction pass plus the loop's persona-free text, none of which depend
  on the persona (float32 ``.npy``):

  ``driving_condition.npy`` ``[S, 20, T_lat, h, w]``  per segment: the i2v mask (all frames known)
      stacked on the VAE latents of that segment's driving frames; the extract pass's hidden
      states are its channels 4: (so the latents are stored once);
  ``clip_context.npy`` ``[1, N, 1280]``  CLIP penultimate features of the driving video's first
      (real) frame;
  ``gen_condition.npy`` ``[20, T_lat, h, w]``  the first segment's generation-side conditioning
      (zero mask over the latents of an all-zero video);
  ``negative_embeds.npy`` / ``prompt_ref_embeds.npy`` ``[1, 512, D]``  UMT5.

- **Reference K/V, per (loop, resolution, model, segment)** ``.../{W}x{H}/kv/`` (only with
  ``reference_kv="fp8-file"``): ``kv_{k}.npy`` uint8 ``[L, 2, N_ref, heads, head_dim]`` (e4m3 bytes
  of the pre-RoPE keys and values of every layer) and ``kv_scale_{k}.npy`` float32
  ``[L, 2, N_ref, heads, 1]`` (one absmax scale per token and head).

- **Tier 2, per (persona, resolution, background)** ``{persona_cache}/wan-animate-2/{W}x{H}/``:
  ``ref_latents.npy`` ``[20, 1, h, w]`` (i2v mask + the reference image's latents),
  ``image_tokens.npy`` ``[1, N, 1280]`` (CLIP features of the reference image) and
  ``prompt_embeds.npy`` ``[1, 512, D]`` (UMT5 of the prompt: the ``prompt`` option, else the
  persona's caption, :mod:`.caption` — it describes the person, so it is the persona's; the
  negative and reference prompts are the same for every persona and stay in Tier 1).

Driving video: the loop's driving clip (:mod:`newsmotion_engine.guidance.driver`: a real video of
a person performing the loop at 24 fps — the user's own clip, the custom loop's source video, or
the warp render of the fixed driver portrait for a canonical loop), read at W x H. It is
persona-free, so Tier 1 stays per loop. Segments past its end continue it cyclically (the loops
are seamless); its digest is part of Tier 1's params.

Staleness (``params``): format version, size, segment plan, model identity, the prompts each tier
holds, the parent cache's source sha256, the driving clip's digest (Tier 1), the background
(Tier 2) and the transformer settings (K/V).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from newsmotion_engine import cachedir
from newsmotion_engine.cachedir import ArraySpec
from newsmotion_engine.errors import CacheCorruptError
from newsmotion_engine.render.backends.wan.artifacts import F32, check_shape, save_arrays
from newsmotion_engine.render.backends.wan.segments import SegmentPlan

__all__ = [
    "GUIDANCE_SCHEMA",
    "PERSONA_SCHEMA",
    "GuidanceArtifacts",
    "PersonaArtifacts",
    "guidance_artifacts_dir",
    "kv_cache_dir",
    "kv_schema",
    "persona_artifacts_dir",
    "read_guidance_artifacts",
    "read_kv_segment",
    "read_persona_artifacts",
    "write_guidance_artifacts",
    "write_kv_cache",
    "write_persona_artifacts",
]

BACKEND_DIR = "wan-animate-2"
FORMAT_VERSION = 2
TEXT_TOKENS = 512
VAE_SCALE = 8
GUIDANCE_SCHEMA = cachedir.CacheSchema(
    kind="wan-animate-2-guidance",
    version=FORMAT_VERSION,
    arrays={
        "driving_condition.npy": ArraySpec(F32, (None, 20, None, None, None)),
        "clip_context.npy": ArraySpec(F32, (1, None, None)),
        "gen_condition.npy": ArraySpec(F32, (20, None, None, None)),
        "negative_embeds.npy": ArraySpec(F32, (1, TEXT_TOKENS, None)),
        "prompt_ref_embeds.npy": ArraySpec(F32, (1, TEXT_TOKENS, None)),
    },
)
PERSONA_SCHEMA = cachedir.CacheSchema(
    kind="wan-animate-2-persona",
    version=FORMAT_VERSION,
    arrays={"ref_latents.npy": ArraySpec(F32, (20, 1, None, None)), "image_tokens.npy": ArraySpec(F32, (1, None, None)),
            "prompt_embeds.npy": ArraySpec(F32, (1, TEXT_TOKENS, None))},
)


def kv_schema(segments: int) -> cachedir.CacheSchema:
    """The FP8 K/V cache of a loop with ``segments`` segments."""
    arrays: dict[str, ArraySpec] = {}
    for k in range(segments):
        arrays[f"kv_{k}.npy"] = ArraySpec("uint8", (None, 2, None, None, None))
        arrays[f"kv_scale_{k}.npy"] = ArraySpec(F32, (None, 2, None, None, 1))
    return cachedir.CacheSchema(kind="wan-animate-2-kv", version=FORMAT_VERSION, arrays=arrays)


@dataclass
class GuidanceArtifacts:
    """Tier 1 of one (loop, resolution, model): memory-mapped float32 arrays."""

    driving_condition: np.ndarray  # [S, 20, T_lat, h, w]
    clip_context: np.ndarray  # [1, N, 1280]
    gen_condition: np.ndarray  # [20, T_lat, h, w]
    negative_embeds: np.ndarray  # [1, 512, D]
    prompt_ref_embeds: np.ndarray  # [1, 512, D]

    def driving_latents(self, segment: int) -> np.ndarray:
        """The extract pass's hidden states for ``segment``: ``[16, T_lat, h, w]`` (a view)."""
        return self.driving_condition[segment, 4:]


@dataclass
class PersonaArtifacts:
    """Tier 2 of one (persona, resolution, background, model, prompt)."""

    ref_latents: np.ndarray  # [20, 1, h, w]
    image_tokens: np.ndarray  # [1, N, 1280]
    prompt_embeds: np.ndarray  # [1, 512, D]


def guidance_artifacts_dir(guidance_path: Path, width: int, height: int, root: Path | None = None) -> Path:
    base = root / "guidance" / guidance_path.name if root else guidance_path
    return base / BACKEND_DIR / f"{width}x{height}"


def persona_artifacts_dir(persona_path: Path, width: int, height: int, root: Path | None = None) -> Path:
    base = root / "persona" / persona_path.name if root else persona_path
    return base / BACKEND_DIR / f"{width}x{height}"


def kv_cache_dir(guidance_dir: Path) -> Path:
    return guidance_dir / "kv"


def read_guidance_artifacts(cache_dir: Path, source: Mapping[str, Any], params: Mapping[str, Any], plan: SegmentPlan,
                            width: int, height: int) -> GuidanceArtifacts:  # fmt: skip
    """Validate Tier 1 against ``source`` / ``params`` and memory-map it (shapes checked against
    the plan and size). Raises the :mod:`cachedir` errors (missing / stale / corrupt)."""
    loaded = cachedir.read_cache(cache_dir, GUIDANCE_SCHEMA, expected_source=source, expected_params=params)
    a = loaded.arrays
    h, w, t = height // VAE_SCALE, width // VAE_SCALE, plan.latent_frames
    check_shape(cache_dir / "driving_condition.npy", a["driving_condition.npy"], (plan.segments, 20, t, h, w))
    check_shape(cache_dir / "gen_condition.npy", a["gen_condition.npy"], (20, t, h, w))
    return GuidanceArtifacts(a["driving_condition.npy"], a["clip_context.npy"], a["gen_condition.npy"],
                             a["negative_embeds.npy"], a["prompt_ref_embeds.npy"])  # fmt: skip


def write_guidance_artifacts(cache_dir: Path, artifacts: GuidanceArtifacts, *, source: Mapping[str, Any],
                             params: Mapping[str, Any], extra: Mapping[str, Any]) -> None:  # fmt: skip
    """Write Tier 1 atomically (under the cache's lock: :func:`cachedir.ensure`)."""

    def build(tmp: Path) -> None:
        save_arrays(tmp, {"driving_condition.npy": artifacts.driving_condition, "clip_context.npy": artifacts.clip_context,
                    "gen_condition.npy": artifacts.gen_condition,
                    "negative_embeds.npy": artifacts.negative_embeds, "prompt_ref_embeds.npy": artifacts.prompt_ref_embeds})  # fmt: skip

    cachedir.write_cache(cache_dir, build, schema=GUIDANCE_SCHEMA, source=source, params=params, extra=extra)


def read_persona_artifacts(cache_dir: Path, source: Mapping[str, Any], params: Mapping[str, Any],
                           width: int, height: int) -> PersonaArtifacts:  # fmt: skip
    loaded = cachedir.read_cache(cache_dir, PERSONA_SCHEMA, expected_source=source, expected_params=params)
    ref = loaded.arrays["ref_latents.npy"]
    check_shape(cache_dir / "ref_latents.npy", ref, (20, 1, height // VAE_SCALE, width // VAE_SCALE))
    return PersonaArtifacts(ref, loaded.arrays["image_tokens.npy"], loaded.arrays["prompt_embeds.npy"])


def write_persona_artifacts(cache_dir: Path, artifacts: PersonaArtifacts, *, source: Mapping[str, Any],
                            params: Mapping[str, Any], extra: Mapping[str, Any]) -> None:  # fmt: skip
    def build(tmp: Path) -> None:
        save_arrays(tmp, {"ref_latents.npy": artifacts.ref_latents, "image_tokens.npy": artifacts.image_tokens,
                    "prompt_embeds.npy": artifacts.prompt_embeds})

    cachedir.write_cache(cache_dir, build, schema=PERSONA_SCHEMA, source=source, params=params, extra=extra)


def write_kv_cache(cache_dir: Path, segments: list[tuple[np.ndarray, np.ndarray]], *, source: Mapping[str, Any],
                   params: Mapping[str, Any], extra: Mapping[str, Any]) -> None:  # fmt: skip
    """Write the FP8 K/V of every segment: ``segments[k] = (uint8 bytes, float32 scales)``."""

    def build(tmp: Path) -> None:
        for k, (data, scale) in enumerate(segments):
            save_arrays(tmp, {f"kv_{k}.npy": data, f"kv_scale_{k}.npy": scale})

    cachedir.write_cache(cache_dir, build, schema=kv_schema(len(segments)), source=source, params=params, extra=extra)


def read_kv_segment(cache_dir: Path, segments: int, segment: int, source: Mapping[str, Any],
                    params: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """Memory-mapped ``(uint8 e4m3 bytes, float32 scales)`` of one segment's K/V."""
    loaded = cachedir.read_cache(cache_dir, kv_schema(segments), expected_source=source, expected_params=params)
    data, scale = loaded.arrays[f"kv_{segment}.npy"], loaded.arrays[f"kv_scale_{segment}.npy"]
    if data.shape[:4] != scale.shape[:4]:
        raise CacheCorruptError(cache_dir / f"kv_scale_{segment}.npy", f"shape {list(scale.shape)} does not match kv_{segment}.npy {list(data.shape)}")
    return data, scale
