"""The two ``wan-animate`` sub-caches, written with :mod:`newsmotion_engine.cachedir`:

- **Persona** ``{persona_cache}/wan-animate/{W}x{H}/``: ``ref_latents.safetensors`` (the reference
  image's VAE latents with the 4 i2v mask channels, float32 ``[1, 20, 1, H/8, W/8]``) and
  ``image_tokens.safetensors`` (CLIP penultimate hidden states of the whole reference frame
  stretched to 224 x 224, as Wan preprocesses it: :func:`encode_image_tokens`; float32
  ``[1, N, D]``). The reference image is the portrait composited over the render background and
  placed on the W x H frame as the warp backend places it.
- **Guidance** ``{guidance_cache}/wan-animate/{W}x{H}/``: ``cond0_latents.safetensors`` (the first
  segment's conditioning: the all-zero video's latents with a zero mask) and
  ``prompt_embeds.safetensors`` (``prompt`` and ``negative`` UMT5 embeddings, ``[1, 512, D]``).

Pose video: not cached. As in Wan's animation mode (the driving pose retargeted to the reference,
drawn on a canvas of the reference's size), it is the clip's retargeted keypoints drawn in Wan's
training style (:mod:`newsmotion_engine.guidance.wan_pose`) where :func:`reference_frame` places
the portrait (:func:`pose_frames`), so it depends on the persona: the backend VAE-encodes it per
render (:func:`encode_pose_latents`, once per inference segment). Segments past the clip's end
continue it cyclically (the loops are seamless), where the stock pipeline reflects.

Staleness key (``params``): format version, resolution, segment plan, model identity digest, the
parent cache's source sha256 (and the prompt / background that went in). Any difference ->
:class:`CacheStaleError` on read. Reading is this module's :func:`read_guidance_artifacts` /
:func:`read_persona_artifacts` (validated metadata, then the tensors with a shape check); writing
is :func:`write_guidance_artifacts` / :func:`write_persona_artifacts` (atomic, via
:func:`cachedir.write_cache`). The backend's ``prepare_guidance`` / ``prepare_persona`` combine
them through :func:`cachedir.ensure` (the double-checked read-or-build); its render path only reads.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from newsmotion_engine import cachedir
from newsmotion_engine.errors import CacheCorruptError

__all__ = [
    "GUIDANCE_SCHEMA",
    "PERSONA_SCHEMA",
    "GuidanceArtifacts",
    "encode_pose_latents",
    "PersonaArtifacts",
    "SegmentPlan",
    "guidance_artifacts_dir",
    "i2v_mask",
    "persona_artifacts_dir",
    "plan_segments",
    "pose_frames",
    "read_guidance_artifacts",
    "read_persona_artifacts",
    "reference_frame",
    "write_guidance_artifacts",
    "write_persona_artifacts",
]

BACKEND_DIR = "wan-animate"
FORMAT_VERSION = 1
# 2: CLIP sees the whole reference frame stretched to 224 x 224 (was centre-cropped): older ones are rebuilt.
PERSONA_SCHEMA_VERSION = 2
PERSONA_SCHEMA = cachedir.CacheSchema(
    kind="wan-animate-persona", version=PERSONA_SCHEMA_VERSION, arrays={},
    files=("ref_latents.safetensors", "image_tokens.safetensors"),
)  # fmt: skip
# 2: the pose latents left the guidance sub-cache (encoded per render): older ones are rebuilt.
GUIDANCE_SCHEMA_VERSION = 2
GUIDANCE_SCHEMA = cachedir.CacheSchema(
    kind="wan-animate-guidance", version=GUIDANCE_SCHEMA_VERSION, arrays={},
    files=("cond0_latents.safetensors", "prompt_embeds.safetensors"),
)  # fmt: skip
TEXT_TOKENS = 512
VAE_SCALE_SPATIAL = 8
VAE_SCALE_TEMPORAL = 4
DEFAULT_PROMPT = "a news anchor speaking to the camera with natural hand gestures, plain background"


@dataclass(frozen=True)
class SegmentPlan:
    """How a clip of ``frames`` splits into inference segments (as the stock pipeline does)."""

    frames: int
    segment_frames: int
    prev_frames: int
    segments: int

    @property
    def effective(self) -> int:
        return self.segment_frames - self.prev_frames

    @property
    def latent_frames(self) -> int:
        return (self.segment_frames - 1) // VAE_SCALE_TEMPORAL + 1

    def start(self, k: int) -> int:
        return k * self.effective

    def as_dict(self) -> dict[str, int]:
        return {"frames": self.frames, "segment_frames": self.segment_frames, "prev_frames": self.prev_frames,
                "segments": self.segments}  # fmt: skip


def plan_segments(frames: int, segment_frames: int, prev_frames: int, *, fit: bool = False) -> SegmentPlan:
    """Segments of ``segment_frames`` overlapping by ``prev_frames`` covering ``frames``.

    ``fit=True``: a clip shorter than one segment gets one segment of its own length, rounded up
    to the model's ``4k + 1`` (a 60-keyframe clip denoises 61 frames, not 77): no work is spent on
    frames that are thrown away. The stock pipeline (``fit=False``) always runs whole segments.
    """
    if fit and frames < segment_frames:
        segment_frames = max(5, VAE_SCALE_TEMPORAL * math.ceil((frames - 1) / VAE_SCALE_TEMPORAL) + 1)
    eff = segment_frames - prev_frames
    rest = max(frames - prev_frames, 1)
    segments = max(1, math.ceil(rest / eff))
    return SegmentPlan(frames, segment_frames, prev_frames, segments)


def fitted_segment_frames(frames: int, max_segment_frames: int, prev_frames: int) -> int:
    """The shortest ``4k + 1`` segment length that covers ``frames`` in as many segments as
    ``max_segment_frames`` would: 120 frames at 81 take two segments of 61 (121 frames rendered)
    instead of two of 81 (161 rendered, 41 thrown away). Each segment is still whole."""
    segments = plan_segments(frames, max_segment_frames, prev_frames).segments
    need = math.ceil(max(frames - prev_frames, 1) / segments) + prev_frames
    return min(max_segment_frames, max(5, VAE_SCALE_TEMPORAL * math.ceil((need - 1) / VAE_SCALE_TEMPORAL) + 1))


def persona_artifacts_dir(persona_path: Path, width: int, height: int, root: Path | None = None) -> Path:
    base = root / "persona" / persona_path.name if root else persona_path
    return base / BACKEND_DIR / f"{width}x{height}"


def guidance_artifacts_dir(guidance_path: Path, width: int, height: int, root: Path | None = None,
                           keyframes: int = 1) -> Path:  # fmt: skip
    """``{guidance}/wan-animate/{W}x{H}`` (``{W}x{H}-k{N}`` for the pose video of 1:N keyframes)."""
    base = root / "guidance" / guidance_path.name if root else guidance_path
    return base / BACKEND_DIR / (f"{width}x{height}" if keyframes == 1 else f"{width}x{height}-k{keyframes}")


def source_digest(cache: Any) -> str:
    """The parent cache's source sha256 (or a digest of its whole source record)."""
    src = (getattr(cache, "metadata", None) or {}).get("source") or {}
    return str(src.get("sha256") or cachedir.sha256_json(src))


def i2v_mask(latent_t: int, h: int, w: int, mask_len: int, torch_mod: Any = None):
    """The 4-channel i2v mask ``[1, 4, latent_t, h, w]``: the first ``mask_len`` pixel frames are
    known (1), the rest generated (0); pixel frame 0 counts four times (Wan's first latent frame)."""
    import torch

    pix = torch.zeros(1, 1, (latent_t - 1) * VAE_SCALE_TEMPORAL + 1, h, w)
    pix[:, :, :mask_len] = 1
    first = pix[:, :, :1].repeat_interleave(VAE_SCALE_TEMPORAL, dim=2)
    pix = torch.cat([first, pix[:, :, 1:]], dim=2)
    return pix.view(1, latent_t, VAE_SCALE_TEMPORAL, h, w).transpose(1, 2).contiguous()


def reference_frame(persona: Any, width: int, height: int, background: tuple[int, int, int]) -> np.ndarray:
    """The persona's portrait over ``background`` on a ``width`` x ``height`` frame (uint8 RGB),
    placed as the warp backend places it (fit, bottom-centre)."""
    import cv2

    from newsmotion_engine.render.warp import place_portrait

    portrait = np.asarray(persona.portrait)
    alpha = np.asarray(persona.person_mask).astype(np.float32)[..., None] / 255.0
    bg = np.array(background, np.float32)
    comp = (portrait.astype(np.float32) * alpha + bg * (1 - alpha)).astype(np.uint8)
    ox, oy, pw, ph = place_portrait(portrait.shape[:2], width, height)
    out = np.empty((height, width, 3), np.uint8)
    out[:] = np.array(background, np.uint8)
    scaled = cv2.resize(comp, (max(1, round(pw)), max(1, round(ph))), interpolation=cv2.INTER_AREA)
    x0, y0 = round(ox), round(oy)
    x1, y1 = min(width, x0 + scaled.shape[1]), min(height, y0 + scaled.shape[0])
    sx0, sy0 = max(0, -x0), max(0, -y0)
    out[max(0, y0):y1, max(0, x0):x1] = scaled[sy0 : sy0 + y1 - max(0, y0), sx0 : sx0 + x1 - max(0, x0)]
    return out


def pose_frames(persona: Any, keypoints: np.ndarray, width: int, height: int) -> np.ndarray:
    """The pose video of a clip: uint8 ``[T, height, width, 3]``, ``keypoints`` (``[T, 133, 3]``,
    retargeted to the persona: normalized to its portrait) drawn in Wan-Animate's training style
    where :func:`reference_frame` places the portrait, so the skeleton lies on the reference
    person and keeps its proportions at any output aspect ratio. The backend and the GPU benches'
    stock side both draw through this."""
    from newsmotion_engine.guidance.wan_pose import draw_wan_pose_video
    from newsmotion_engine.render.warp import place_portrait

    box = place_portrait(np.asarray(persona.portrait).shape[:2], width, height)
    return draw_wan_pose_video(keypoints, width, height, box=box)


def encode_pose_latents(vae: Any, frames: np.ndarray, plan: SegmentPlan, device: Any):
    """One VAE encoding per inference segment of ``plan`` of the pose video ``frames`` (uint8
    ``[T, H, W, 3]``; segment ``k`` covers frames ``plan.start(k) ...``, cyclically past the end)
    -> float32 ``[S, 16, T_lat, H/8, W/8]`` on the CPU.

    Encodes through a shallow copy of ``vae``: it shares the weights but has its own temporal
    feature caches. diffusers' Wan VAE keeps those on the module and clears them at every encode
    and decode, so an encode on the render queue's prepare thread would otherwise corrupt a
    decode running on its finish thread at the same time.
    """
    import copy

    import torch

    encoder = copy.copy(vae)
    n = int(frames.shape[0])
    out = []
    for k in range(plan.segments):
        idx = [(plan.start(k) + j) % n for j in range(plan.segment_frames)]
        out.append(vae_encode(encoder, to_video_tensor(frames[idx]), device))
    return torch.cat(out)


def to_video_tensor(frames: np.ndarray):
    """uint8 ``[T, H, W, 3]`` -> float32 ``[1, 3, T, H, W]`` in [-1, 1]."""
    import torch

    t = torch.from_numpy(np.ascontiguousarray(frames)).float().div_(127.5).sub_(1.0)
    return t.permute(3, 0, 1, 2).unsqueeze(0)


def vae_encode(vae: Any, video, device: Any):
    """VAE latents (distribution mode, as the stock pipeline's ``argmax``), normalized with the
    VAE's latents mean/std. ``video`` float ``[1, 3, T, H, W]`` in [-1, 1] -> float32 on CPU."""
    import torch

    with torch.no_grad():
        lat = vae.encode(video.to(device=device, dtype=vae.dtype)).latent_dist.mode().float()
    z = vae.config.z_dim
    mean = torch.tensor(vae.config.latents_mean, dtype=torch.float32, device=lat.device).view(1, z, 1, 1, 1)
    std = torch.tensor(vae.config.latents_std, dtype=torch.float32, device=lat.device).view(1, z, 1, 1, 1)
    return ((lat - mean) / std).cpu()


def encode_prompts(tokenizer: Any, text_encoder: Any, texts: list[str], device: Any):
    """UMT5 last hidden states, trimmed to each prompt's length and zero-padded to 512 tokens
    (the stock pipeline's layout) -> float32 ``[len(texts), 512, D]`` on CPU."""
    import torch

    tok = tokenizer(texts, padding="max_length", max_length=TEXT_TOKENS, truncation=True,
                    add_special_tokens=True, return_attention_mask=True, return_tensors="pt")  # fmt: skip
    ids, mask = tok["input_ids"].to(device), tok["attention_mask"].to(device)
    with torch.no_grad():
        out = text_encoder(ids, mask).last_hidden_state.float()
    lens = mask.sum(dim=1)
    for i, n in enumerate(lens.tolist()):
        out[i, n:] = 0
    return out.cpu()


def encode_image_tokens(image_encoder: Any, frame: np.ndarray, device: Any):
    """CLIP penultimate hidden states of one uint8 RGB frame -> float32 ``[1, N, D]`` on CPU.

    Preprocessed as Wan does (its ``CLIPModel.visual``): the whole frame stretched to 224 x 224
    (bicubic), then CLIP's mean / std; not ``CLIPImageProcessor``'s resize-and-centre-crop, which
    keeps only the middle of a portrait frame. Through diffusers' ``clip_visual_encode``, the
    function wan-animate-2's caches use."""
    import torch
    from diffusers.modular_pipelines.wan_animate_2.encoders import clip_visual_encode

    pixels = to_video_tensor(frame[None])[0, :, 0].to(device)  # [3, H, W] in [-1, 1]
    with torch.no_grad():
        return clip_visual_encode(image_encoder, pixels, device, image_encoder.dtype).float().cpu()


def save_tensors(path: Path, tensors: dict[str, Any], metadata: dict[str, str] | None = None) -> None:
    from safetensors.torch import save_file

    save_file({k: v.contiguous() for k, v in tensors.items()}, str(path), metadata=metadata)


def load_tensors(path: Path, expected: dict[str, tuple[int | None, ...]]) -> dict[str, Any]:
    """Memory-mapped safetensors load with a shape check (``None`` = any size)."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        tensors = load_file(str(path))
    except (SafetensorError, OSError, ValueError) as exc:
        raise CacheCorruptError(path, f"not a readable safetensors file ({exc})") from None
    for name, shape in expected.items():
        if name not in tensors:
            raise CacheCorruptError(path, f"lacks tensor {name!r}")
        got = tuple(tensors[name].shape)
        if len(got) != len(shape) or any(s is not None and s != g for s, g in zip(shape, got)):
            raise CacheCorruptError(path, f"tensor {name} has shape {list(got)}, expected {list(shape)}")
    return tensors


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
        CacheMissingError / CacheStaleError / CacheCorruptError (from :mod:`cachedir`, or a tensor
        of the wrong shape).
    """
    cachedir.read_cache(cache_dir, GUIDANCE_SCHEMA, expected_source=source, expected_params=params)
    h, w, t = height // VAE_SCALE_SPATIAL, width // VAE_SCALE_SPATIAL, plan.latent_frames
    cond0 = load_tensors(cache_dir / "cond0_latents.safetensors", {"cond0_latents": (1, 20, t, h, w)})
    text = load_tensors(cache_dir / "prompt_embeds.safetensors", {"prompt": (1, TEXT_TOKENS, None), "negative": (1, TEXT_TOKENS, None)})
    return GuidanceArtifacts(cond0["cond0_latents"], text["prompt"], text["negative"])


def write_guidance_artifacts(cache_dir: Path, artifacts: GuidanceArtifacts, *, source: Mapping[str, Any],
                             params: Mapping[str, Any], extra: Mapping[str, Any]) -> None:  # fmt: skip
    """Write the guidance sub-cache atomically (call under the cache's lock: :func:`cachedir.ensure`)."""
    meta = {"weights": str(extra.get("weights", ""))}

    def build(tmp: Path) -> None:
        save_tensors(tmp / "cond0_latents.safetensors", {"cond0_latents": artifacts.cond0_latents}, meta)
        save_tensors(tmp / "prompt_embeds.safetensors", {"prompt": artifacts.prompt_embeds, "negative": artifacts.negative_embeds}, meta)

    cachedir.write_cache(cache_dir, build, schema=GUIDANCE_SCHEMA, source=source, params=params, extra=extra)


def read_persona_artifacts(cache_dir: Path, source: Mapping[str, Any], params: Mapping[str, Any],
                           width: int, height: int) -> PersonaArtifacts:  # fmt: skip
    """Validate the persona sub-cache against ``source`` / ``params`` and load its tensors."""
    cachedir.read_cache(cache_dir, PERSONA_SCHEMA, expected_source=source, expected_params=params)
    h, w = height // VAE_SCALE_SPATIAL, width // VAE_SCALE_SPATIAL
    ref = load_tensors(cache_dir / "ref_latents.safetensors", {"ref_latents": (1, 20, 1, h, w)})
    tokens = load_tensors(cache_dir / "image_tokens.safetensors", {"image_tokens": (1, None, None)})
    return PersonaArtifacts(ref["ref_latents"], tokens["image_tokens"])


def write_persona_artifacts(cache_dir: Path, artifacts: PersonaArtifacts, *, source: Mapping[str, Any],
                            params: Mapping[str, Any], extra: Mapping[str, Any]) -> None:  # fmt: skip
    """Write the persona sub-cache atomically (call under the cache's lock: :func:`cachedir.ensure`)."""
    meta = {"weights": str(extra.get("weights", ""))}

    def build(tmp: Path) -> None:
        save_tensors(tmp / "ref_latents.safetensors", {"ref_latents": artifacts.ref_latents}, meta)
        save_tensors(tmp / "image_tokens.safetensors", {"image_tokens": artifacts.image_tokens}, meta)

    cachedir.write_cache(cache_dir, build, schema=PERSONA_SCHEMA, source=source, params=params, extra=extra)
