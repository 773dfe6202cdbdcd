"""The ``scail-2`` render backend: SCAIL-2's in-context DiT (:mod:`.transformer`, on diffusers' Wan
blocks) driven by the two-tier caches.

Inputs, as the official inference prepares them (zai-org/SCAIL-2): a reference image and its mask,
a raw driving video of a person and its per-frame mask.

- Driving video (Tier 1, per loop): the loop's driving clip (:mod:`newsmotion_engine.guidance.driver`,
  the clip wan-animate-2 is driven by: a user's clip, a custom loop's source video, or the warp
  render of the fixed driver portrait), read at 24 fps, centre-cropped to the model size, resized
  to half size and VAE-encoded per 81-frame segment; its matte (:func:`.masks.driving_matte`) as
  mask latents. Segments past the clip's end continue it cyclically (the loops are seamless).
- Reference (Tier 2, per persona): the portrait over the render's background, placed as every
  backend places it; its matte placed the same way as the reference mask; CLIP of the frame.
- Prompt / negative prompt: persona-free (the default prompt; ``prompt="loop"`` takes a canonical
  loop's own text), so their embeddings are Tier 1.

Renders only load the caches. Segments: 81 frames, each after the first continuing from the
previous segment's last 5 decoded frames (clean history; those 5 frames are not emitted again).
The model renders at :func:`~.config.model_size` (multiples of 32; 704x1280 for our 720x1280
canvas) and each frame is framed onto the spec's size over its background, then composited on the
exact chroma colour (``chroma="matte"``, as the other diffusion backends). The clip is generated at
24 fps and re-timed to the loop's frame count (:func:`~..wan.retime.retime_frames`).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from newsmotion_engine.guidance.driver import MODEL_FPS, loop_fps, model_frame_count
from newsmotion_engine.render.base import BackendNeeds, RenderSpec
from newsmotion_engine.render.backends.scail_2 import caches as C
from newsmotion_engine.render.backends.scail_2.config import DEFAULT_PROMPT, HISTORY_FRAMES, NAME, Scail2Options, model_size
from newsmotion_engine.render.backends.wan import artifacts, encoders, segments
from newsmotion_engine.render.backends.wan.diffusers_backend import DiffusersBackend, DiffusersOOMError
from newsmotion_engine.render.backends.wan.prompts import loop_prompt

__all__ = ["Scail2Backend", "Scail2OOMError", "centre_crop", "frame_onto"]


class Scail2OOMError(DiffusersOOMError):
    """The GPU ran out of memory; the message names the settings that reduce memory."""


def centre_crop(frames: np.ndarray, width: int, height: int) -> np.ndarray:
    """The centre ``width`` x ``height`` of frames ``[N, H, W, ...]`` (the model size inside the spec)."""
    H, W = frames.shape[1:3]
    y0, x0 = (H - height) // 2, (W - width) // 2
    return np.ascontiguousarray(frames[:, y0 : y0 + height, x0 : x0 + width])


def frame_onto(frame: np.ndarray, width: int, height: int, background: tuple[int, int, int]) -> np.ndarray:
    """A model-size frame placed at the centre of a ``width`` x ``height`` frame of ``background``
    (the inverse of :func:`centre_crop`)."""
    h, w = frame.shape[:2]
    if (h, w) == (height, width):
        return frame
    out = np.empty((height, width, 3), np.uint8)
    out[:] = np.array(background, np.uint8)
    y0, x0 = (height - h) // 2, (width - w) // 2
    out[y0 : y0 + h, x0 : x0 + w] = frame
    return out


class Scail2Backend(DiffusersBackend):
    """See the module docstring. ``get_backend("scail-2", preset="tiny", device="cpu")``."""

    name = NAME
    needs = BackendNeeds(
        guidance=frozenset({"keypoints", "driving_clip", "pose_latents", "driving_masks", "prompt_embeds"}),
        persona=frozenset({"portrait", "person_mask", "ref_latents", "ref_mask", "image_tokens"}),
    )
    options_class = Scail2Options
    caches = C
    oom_error = Scail2OOMError
    driven_by_clip = True
    retimes_to_loop_rate = True

    # ------------------------------------------------------------------ lifecycle
    def _load_components(self) -> Any:
        from newsmotion_engine.render.backends.scail_2.components import load_render_components

        return load_render_components(self.options)

    def _settings(self) -> dict[str, Any]:
        o = self.options
        return {
            "mode": o.mode,
            "steps": o.num_steps,
            "guidance_scale": o.cfg_scale,
            "batch_cfg": o.batch_cfg,
            "segment_frames": o.segment_length,
            "history_frames": HISTORY_FRAMES,
            "prompt": o.prompt if o.prompt is not None else DEFAULT_PROMPT,
            "negative_prompt": o.negative_prompt,
            "accelerations": o.accel_summary(),
            "driving_video": f"the loop's driving clip at {MODEL_FPS} fps (guidance/driver.py) and its matte (scail_2/masks.py)",
            "model_size": "the largest multiple-of-32 size inside the render size, framed onto it",
            "model_fps": MODEL_FPS,
            "chroma": o.chroma,
        }

    # ------------------------------------------------------------------ caches
    def plan(self, frames: int) -> segments.SegmentPlan:
        return segments.plan_segments(frames, self.options.segment_length, HISTORY_FRAMES)

    def _loop_frames(self, guidance: Any, spec: RenderSpec) -> int:
        """Tier 1 is planned for the loop's frames at the model's 24 fps (its driving clip's)."""
        return model_frame_count(len(np.asarray(guidance.keypoints)), loop_fps(guidance))

    def guidance_params(self, guidance: Any, spec: RenderSpec, plan: Any) -> tuple[dict, dict]:
        """The shared params (the driving clip's origin and digest among them) with this backend's prompt."""
        source, params = super().guidance_params(guidance, spec, plan)
        params["prompt"] = loop_prompt(guidance, self.options.prompt, default=DEFAULT_PROMPT)
        return source, params

    def _build_guidance(self, path: Path, guidance: Any, spec: RenderSpec, plan: segments.SegmentPlan, source: dict, params: dict) -> None:
        import torch
        import torch.nn.functional as F

        from newsmotion_engine.guidance.driver import load_driving_clip
        from newsmotion_engine.render.backends.scail_2.components import load_text_encoder
        from newsmotion_engine.render.backends.scail_2.masks import driving_matte, mask_latents, white_mask

        comps, dev = self.components, self.components.device
        mw, mh = model_size(spec.width, spec.height)
        clip = load_driving_clip(guidance, spec.width, spec.height)
        matte = centre_crop(driving_matte(clip), mw, mh)
        frames = centre_crop(np.asarray(clip.frames), mw, mh)
        n = frames.shape[0]
        poses, masks = [], []
        with torch.no_grad():
            for k in range(plan.segments):
                index = [(plan.start(k) + j) % n for j in range(plan.segment_frames)]
                video = encoders.to_video_tensor(frames[index])[0].permute(1, 0, 2, 3)  # [T, 3, H, W]
                half = F.interpolate(video, scale_factor=0.5, mode="bilinear", align_corners=False)
                poses.append(encoders.vae_encode(comps.vae, half.permute(1, 0, 2, 3)[None], dev)[0])
                masks.append(mask_latents(white_mask(matte[index]), half=True))
            tok, te = load_text_encoder(self.options, dev)
            try:
                text = encoders.encode_prompts(tok, te, [params["prompt"], params["negative_prompt"]], dev)
            finally:
                del te
                if dev.type == "cuda":
                    torch.cuda.empty_cache()
        built = C.GuidanceArtifacts(torch.stack(poses).numpy(), torch.stack(masks).numpy(), text[:1].numpy(), text[1:].numpy())
        C.write_guidance_artifacts(path, built, source=source, params=params, extra={**self._cache_extra(), "prompt": params["prompt"]})

    def _build_persona(self, path: Path, persona: Any, spec: RenderSpec, source: dict, params: dict) -> None:
        import torch

        from newsmotion_engine.render.backends.scail_2.components import load_image_encoder
        from newsmotion_engine.render.backends.scail_2.masks import mask_latents, white_mask

        comps, dev = self.components, self.components.device
        mw, mh = model_size(spec.width, spec.height)
        frame = centre_crop(artifacts.reference_frame(persona, spec.width, spec.height, spec.background)[None], mw, mh)[0]
        mask = centre_crop(artifacts.reference_mask(persona, spec.width, spec.height)[None], mw, mh)
        with torch.no_grad():
            ref = encoders.vae_encode(comps.vae, encoders.to_video_tensor(frame[None]), dev)[0]
            ref_mask = mask_latents(white_mask(mask))
            enc = load_image_encoder(self.options, dev)
            try:
                tokens = encoders.encode_image_tokens(enc, frame, dev)
            finally:
                del enc
        C.write_persona_artifacts(path, C.PersonaArtifacts(ref.numpy(), ref_mask.numpy(), tokens.numpy()), source=source,
                                  params=params, extra=self._cache_extra())  # fmt: skip

    # ------------------------------------------------------------------ render
    def _memory_tips(self, spec: RenderSpec) -> list[str]:
        return self._unused_memory_accelerations("fp8", "vae_tiling", "ffn_chunks")

    def segment_inputs(self, g: C.GuidanceArtifacts, p: C.PersonaArtifacts, segment: int):
        """The :class:`~.denoise.SegmentInputs` of ``segment`` on the device, from the caches."""
        from newsmotion_engine.render.backends.scail_2.denoise import SegmentInputs

        dev = self.components.device
        t = lambda a: artifacts.as_tensor(a).to(dev)  # noqa: E731
        return SegmentInputs(text=t(g.prompt_embeds), negative=t(g.negative_embeds), image=t(p.image_tokens),
                             reference=t(p.ref_latents)[None], reference_mask=t(p.ref_mask)[None],
                             pose=t(g.pose_latents[segment])[None], driving_mask=t(g.driving_masks[segment])[None])  # fmt: skip

    def _model_frames(self, guidance: Any, persona: Any, keypoints: np.ndarray, spec: RenderSpec) -> Iterator[np.ndarray]:
        """The clip at 24 fps (``round(T * 24 / loop fps)`` frames); :meth:`_retimed` re-times it
        to the ``T`` asked for."""
        return self._frames(guidance, persona, self._model_frame_count(guidance, keypoints), spec)

    def _frames(self, guidance: Any, persona: Any, frames: int, spec: RenderSpec) -> Iterator[np.ndarray]:
        import torch

        from newsmotion_engine.render.backends.scail_2.denoise import render_segment

        o = self.options
        plan = self.plan(frames)
        t0 = time.perf_counter()
        g = self.load_guidance(guidance, spec, frames)
        p = self.load_persona(persona, spec)
        h, w = C.latent_size(spec.width, spec.height)
        stats: dict[str, Any] = {"segments": plan.segments, "mode": o.mode, "prep_s": round(time.perf_counter() - t0, 3),
                                 "denoise_s": 0.0, "decode_s": 0.0, "cond_passes": 0, "uncond_passes": 0}  # fmt: skip
        gen = torch.Generator("cpu").manual_seed(spec.seed)
        emitted, tail = 0, None
        for k in range(plan.segments):
            noise = torch.randn((16, plan.latent_frames, h, w), generator=gen, dtype=torch.float32)
            result = render_segment(self.components, self.segment_inputs(g, p, k), noise, steps=o.num_steps,
                                    guidance_scale=o.cfg_scale, replace=o.replace, previous_tail=tail,
                                    batch_cfg=o.batch_cfg)  # fmt: skip
            for key in ("denoise_s", "decode_s", "cond_passes", "uncond_passes"):
                stats[key] += result.stats[key]
            tail = result.video[:, :, -HISTORY_FRAMES:]
            for frame in result.frames[0 if k == 0 else HISTORY_FRAMES :]:
                if emitted >= frames:
                    break
                emitted += 1
                yield frame_onto(frame, spec.width, spec.height, spec.background)
        for key in ("denoise_s", "decode_s"):
            stats[key] = round(stats[key], 3)
        self.last_render = stats
