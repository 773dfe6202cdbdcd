"""The two ``wan-animate`` sub-caches, written with :mod:`newsmotion_engine.cachedir`:

- **Persona** ``{persona_cache}/wan-animate/{W}x{H}/``: ``ref_latents.safetensors`` (the reference
  image's VAE latents with the 4 i2v mask channels, float32 ``[1, 20, 1, H/8, W/8]``) and
  ``image_tokens.safetensors`` (CLIP penultimate hidden states, float32 ``[1, N, D]``). The reference
  image is the portrait composited over the render background and placed on the W x H frame as the
  warp backend places it.
- **Guidance** ``{guidance_cache}/wan-animate/{W}x{H}/``: ``pose_latents.safetensors`` (one VAE
  encoding per inference segment of the loop's DWPose drawing, float32 ``[S, 16, T_lat, H/8, W/8]``),
  ``cond0_latents.safetensors`` (the first segment's conditioning: the all-zero video's latents with
  a zero mask), and ``prompt_embeds.safetensors`` (``prompt`` and ``negative`` UMT5 embeddings,
  ``[1, 512, D]``).

Pose video choice: the loop's own (persona-free) keypoints drawn DWPose-style at W x H, so the
latents are a Tier-1 artifact shared by every persona; the retargeted pose is used for the face
video (see ``backend``). Segments past the loop's end continue the loop cyclically (the loops are
seamless), where the stock pipeline reflects.

Staleness key (``params``): format version, resolution, segment plan, model identity digest, the
parent cache's source sha256 (and the prompt / background that went in). Any difference ->
:class:`CacheStaleError` on read -> the backend rebuilds.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from newsmotion_engine import cachedir
from newsmotion_engine.errors import CacheError, CacheCorruptError

__all__ = [
    "GUIDANCE_SCHEMA",
    "PERSONA_SCHEMA",
    "SegmentPlan",
    "ensure_cache",
    "guidance_artifacts_dir",
    "i2v_mask",
    "persona_artifacts_dir",
    "plan_segments",
    "reference_frame",
]

BACKEND_DIR = "wan-animate"
FORMAT_VERSION = 1
PERSONA_SCHEMA = cachedir.CacheSchema(
    kind="wan-animate-persona", version=FORMAT_VERSION, arrays={},
    files=("ref_latents.safetensors", "image_tokens.safetensors"),
)  # fmt: skip
GUIDANCE_SCHEMA = cachedir.CacheSchema(
    kind="wan-animate-guidance", version=FORMAT_VERSION, arrays={},
    files=("pose_latents.safetensors", "cond0_latents.safetensors", "prompt_embeds.safetensors"),
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


def plan_segments(frames: int, segment_frames: int, prev_frames: int) -> SegmentPlan:
    """Segments of ``segment_frames`` overlapping by ``prev_frames`` covering ``frames``."""
    eff = segment_frames - prev_frames
    rest = max(frames - prev_frames, 1)
    segments = max(1, math.ceil(rest / eff))
    return SegmentPlan(frames, segment_frames, prev_frames, segments)


def persona_artifacts_dir(persona_path: Path, width: int, height: int, root: Path | None = None) -> Path:
    base = root / "persona" / persona_path.name if root else persona_path
    return base / BACKEND_DIR / f"{width}x{height}"


def guidance_artifacts_dir(guidance_path: Path, width: int, height: int, root: Path | None = None) -> Path:
    base = root / "guidance" / guidance_path.name if root else guidance_path
    return base / BACKEND_DIR / f"{width}x{height}"


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


def encode_image_tokens(processor: Any, image_encoder: Any, frame: np.ndarray, device: Any):
    """CLIP penultimate hidden states of one uint8 RGB frame -> float32 ``[1, N, D]`` on CPU."""
    import torch

    inputs = processor(images=[frame], return_tensors="pt")
    pixels = inputs["pixel_values"].to(device=device, dtype=image_encoder.dtype)
    with torch.no_grad():
        out = image_encoder(pixel_values=pixels, output_hidden_states=True)
    return out.hidden_states[-2].float().cpu()


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


def ensure_cache(cache_dir: Path, schema: cachedir.CacheSchema, source: dict[str, Any], params: dict[str, Any],
                 build: Callable[[], None]) -> str:  # fmt: skip
    """``"reused"`` when a valid, fresh cache is there, else ``build()`` (which writes it) under the
    cache's lock and ``"built"``; a second process waiting on the lock reuses what the first built."""
    if read_or_none(cache_dir, schema, source, params) is not None:
        return "reused"
    with cachedir.cache_lock(cache_dir):
        if read_or_none(cache_dir, schema, source, params) is not None:
            return "reused"
        build()
        return "built"


def read_or_none(cache_dir: Path, schema: cachedir.CacheSchema, source: dict[str, Any], params: dict[str, Any]):
    """The validated cache, or None when it is missing or stale (both mean: build it)."""
    try:
        return cachedir.read_cache(cache_dir, schema, expected_source=source, expected_params=params)
    except CacheError as exc:
        if isinstance(exc, CacheCorruptError):
            # A damaged cache is rebuilt too, but said out loud: it should not happen.
            import logging

            logging.getLogger(__name__).warning("rebuilding damaged wan-animate cache: %s", exc)
        return None
