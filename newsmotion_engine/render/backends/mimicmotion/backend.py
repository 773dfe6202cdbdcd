"""The ``mimicmotion`` render backend: SVD-xt-1.1 + PoseNet (diffusers components) driven by the
clip's pose frames in MimicMotion's confidence-aware DWPose style.

Caches: one persona sub-cache (:mod:`.caches`: the reference frame's CLIP embedding, VAE latents
and pose frame), built by :meth:`MimicMotionBackend.prepare_persona` (the only place the image
encoder and the VAE encoder run); there is no guidance sub-cache (``prepare_guidance`` builds
nothing: the pose frames depend on the persona and are drawn per render). ``frames`` only loads
and raises :class:`~newsmotion_engine.render.base.BackendCacheError` naming what to build.

Per render (``frames``): the native frame size from the render size (:func:`.config.native_size`:
576 x 1024 for 720 x 1280), the pose frames (the reference pose from the cache, then the clip's
retargeted keypoints drawn where the portrait sits), the windows denoised with progressive latent
fusion (:mod:`.denoise`), the chunked temporal decode, the reference frame dropped, and each frame
framed onto the render canvas (:func:`frame_onto`: scaled to fit, centred, the rest the background;
576 x 1024 -> 720 x 1280 is an exact 1.25x scale with no border). The base class then composites
every frame onto the exact chroma colour.

The official recipe renders 15 fps (``sample_stride`` 2 of a 30-fps driving video); here the
backend renders every frame it is handed, and ``--keyframes 2`` (the render-level stage) gives the
official rate with flow infill in between. Lips: not moved from speech (``moves_lips = False``).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from newsmotion_engine.render.base import BackendNeeds, InvalidSpecError, RenderSpec
from newsmotion_engine.render.backends.mimicmotion import caches as C
from newsmotion_engine.render.backends.mimicmotion.config import NAME, MimicMotionOptions, native_size
from newsmotion_engine.render.backends.wan import artifacts
from newsmotion_engine.render.backends.wan.diffusers_backend import DiffusersBackend, DiffusersOOMError

__all__ = ["MimicMotionBackend", "MimicMotionOOMError", "frame_onto"]


class MimicMotionOOMError(DiffusersOOMError):
    """The GPU ran out of memory; the message names the settings that reduce memory."""


def frame_onto(frame: np.ndarray, width: int, height: int, background: tuple[int, int, int]) -> np.ndarray:
    """``frame`` scaled to fit a ``width`` x ``height`` canvas (aspect kept, centred; area
    interpolation when shrinking, bilinear when growing), the border ``background``."""
    import cv2

    h, w = frame.shape[:2]
    if (w, h) == (width, height):
        return frame
    k = min(width / w, height / h)
    sw, sh = max(1, round(w * k)), max(1, round(h * k))
    scaled = cv2.resize(frame, (sw, sh), interpolation=cv2.INTER_AREA if k < 1 else cv2.INTER_LINEAR)
    out = np.empty((height, width, 3), np.uint8)
    out[:] = np.array(background, np.uint8)
    x0, y0 = (width - sw) // 2, (height - sh) // 2
    out[y0 : y0 + sh, x0 : x0 + sw] = scaled
    return out


class MimicMotionBackend(DiffusersBackend):
    """See the module docstring. ``get_backend("mimicmotion", preset="tiny", steps=2)``."""
    warns_few_steps = False  # MimicMotion is an SVD model: no Wan distillation LoRA fits it

    name = NAME
    needs = BackendNeeds(
        guidance=frozenset({"keypoints"}),
        persona=frozenset({"portrait", "person_mask", "landmarks", "image_embeds", "image_latents", "ref_pose"}),
    )
    options_class = MimicMotionOptions
    caches = C
    oom_error = MimicMotionOOMError  # moves_lips stays the base's False: speech does not move the mouth

    def _load_components(self) -> Any:
        from newsmotion_engine.render.backends.mimicmotion.components import load_render_components

        return load_render_components(self.options)

    def _settings(self) -> dict[str, Any]:
        o = self.options
        return {
            "steps": o.steps,
            "guidance_scale": o.guidance_scale,
            "segment_frames": o.segment_length,
            "overlap": o.window_overlap,
            "resolution": o.native_resolution,
            "noise_aug_strength": o.noise_aug_strength,
            "motion_bucket_id": o.motion_bucket_id,
            "conditioning_fps": o.conditioning_fps,
            "batch_cfg": o.batch_cfg,
            "accelerations": o.accel_summary(),
            "pose_frames": "retargeted keypoints drawn as MimicMotion's DWPose drawing (confidence-scaled colours, "
                           "face dots, no feet) on the reference person; our confidences, not DWPose scores",
            "lips": "not moved from speech",
        }  # fmt: skip

    # ------------------------------------------------------------------ sizes and caches
    def native(self, spec: RenderSpec) -> tuple[int, int]:
        """The model's frame size for ``spec`` (:func:`~.config.native_size`)."""
        return native_size(self.options.native_resolution, spec.width, spec.height)

    def _alignment(self) -> int:
        """Native sides must divide by the VAE's downsampling times the UNet's (64 released)."""
        comps = self.components
        vae_scale = 2 ** (len(comps.vae.config.block_out_channels) - 1)
        return vae_scale * 2 ** (len(comps.unet.config.block_out_channels) - 1)

    def _check_spec(self, spec: RenderSpec) -> None:
        nw, nh = self.native(spec)
        align = self._alignment()
        if nw % align or nh % align:
            raise InvalidSpecError(f"{NAME} renders at {nw}x{nh} for {spec.width}x{spec.height}, which is not divisible by "
                                   f"{align} (VAE x UNet downsampling): use a resolution option divisible by {align}")  # fmt: skip

    def plan(self, frames: int) -> Any:
        from newsmotion_engine.render.backends.mimicmotion.denoise import window_indices

        return window_indices(frames + 1, self.options.segment_length, self.options.window_overlap)

    def prepare_guidance(self, guidance: Any, spec: RenderSpec) -> bool:
        """Nothing to build: the pose frames are drawn per render (they depend on the persona)."""
        self.load()
        self._check_spec(spec)
        return False

    def persona_params(self, persona: Any, spec: RenderSpec) -> tuple[dict, dict]:
        source, params = super().persona_params(persona, spec)
        params["native"] = list(self.native(spec))
        params["noise_aug_strength"] = self.options.noise_aug_strength
        if self.options.noise_aug_strength > 0:  # the noise comes from the render's generator
            params["seed"] = spec.seed
        return source, params

    def _build_persona(self, path: Path, persona: Any, spec: RenderSpec, source: dict, params: dict) -> None:
        import torch

        from newsmotion_engine.render.backends.mimicmotion.components import load_image_encoder

        comps = self.components
        nw, nh = self.native(spec)
        frame = artifacts.reference_frame(persona, nw, nh, spec.background)
        pixels = C.to_model_pixels(frame)[None]  # [1, 3, H, W] in [-1, 1]
        if self.options.noise_aug_strength > 0:
            gen = torch.Generator("cpu").manual_seed(spec.seed)
            pixels = pixels + self.options.noise_aug_strength * torch.randn(pixels.shape, generator=gen)
        with torch.no_grad():
            latents = comps.vae.encode(pixels.to(comps.device, comps.vae_dtype)).latent_dist.mode().float().cpu()
        proc, enc = load_image_encoder(self.options, comps.device)
        try:
            embeds = clip_image_embeds(proc, enc, frame, comps.device)
        finally:
            del enc  # the image encoder lives only while building caches
        ref_pose = C.to_model_pixels(C.pose_frames(persona, np.asarray(persona.landmarks)[None], nw, nh)[0])
        C.write_persona_artifacts(path, C.PersonaArtifacts(embeds, latents, ref_pose), source=source, params=params,
                                  extra=self._cache_extra())  # fmt: skip

    # ------------------------------------------------------------------ render
    def _memory_tips(self, spec: RenderSpec) -> list[str]:
        return [f"decode_chunk lower than {self.options.decode_chunk}", "batch_cfg=false (two UNet calls per window)"]

    def oom_message(self, spec: RenderSpec) -> str:
        nw, nh = self.native(spec)
        tips = [*self._memory_tips(spec), f"a shorter segment_frames (now {self.options.segment_length})",
                f"a lower resolution (now {nw}x{nh})"]  # fmt: skip
        return f"{NAME} ran out of GPU memory at {nw}x{nh}; reduce memory with: " + ", ".join(tips)

    def _frames(self, guidance: Any, persona: Any, keypoints: np.ndarray, spec: RenderSpec) -> Iterator[np.ndarray]:
        import torch

        from newsmotion_engine.render.backends.mimicmotion import denoise as D

        o, comps = self.options, self.components
        t0 = time.perf_counter()
        p = self.load_persona(persona, spec)
        nw, nh = self.native(spec)
        kp = np.asarray(keypoints)
        T = int(kp.shape[0])
        t1 = time.perf_counter()
        driving = C.to_model_pixels(C.pose_frames(persona, kp, nw, nh))
        pose_pixels = torch.cat([p.ref_pose[None], driving])
        pose_s = time.perf_counter() - t1
        # The official generator order: the reference image's augmentation noise, then one window of latents.
        gen = torch.Generator("cpu").manual_seed(spec.seed)
        torch.randn((1, 3, nh, nw), generator=gen)
        h, w = p.image_latents.shape[-2:]
        tile = len(self.plan(T)[0])
        noise = torch.randn((1, tile, 4, h, w), generator=gen)
        inputs = D.DenoiseInputs(p.image_embeds, p.image_latents, pose_pixels, noise,
                                 (float(o.conditioning_fps - 1), float(o.motion_bucket_id), o.noise_aug_strength))  # fmt: skip
        stats = inputs.stats
        stats.update(native=[nw, nh], prep_s=round(time.perf_counter() - t0, 3), pose_draw_s=round(pose_s, 3))
        if getattr(comps.device, "type", "cpu") == "cuda":
            torch.cuda.reset_peak_memory_stats(comps.device)
        latents = D.denoise(comps, inputs, steps=o.steps, guidance_scale=o.guidance_scale, tile=o.segment_length,
                            overlap=o.window_overlap, batch_cfg=o.batch_cfg)  # fmt: skip
        decoded = D.decode_frames(comps.vae, latents, o.decode_chunk, stats)
        next(decoded)  # the reference frame: decoded with the clip (it shapes its chunk), not emitted
        for frame in decoded:
            yield frame_onto(frame, spec.width, spec.height, spec.background)
        if getattr(comps.device, "type", "cpu") == "cuda":
            stats["peak_vram_gib"] = round(torch.cuda.max_memory_allocated(comps.device) / 2**30, 3)
        self.last_render = stats


def clip_image_embeds(processor: Any, encoder: Any, frame: np.ndarray, device: Any):
    """The pipeline's ``_encode_image``: uint8 ``[H, W, 3]`` -> [-1, 1], diffusers' antialiased
    resize to the encoder's size, back to [0, 1], CLIP-normalised (no crop, no rescale), the
    projected embedding ``[1, 1, D]`` (float32, CPU)."""
    import torch
    from diffusers.pipelines.stable_video_diffusion.pipeline_stable_video_diffusion import _resize_with_antialiasing

    size = int(encoder.config.image_size)
    image = torch.from_numpy(np.ascontiguousarray(frame)).float().permute(2, 0, 1)[None] / 255.0
    image = (_resize_with_antialiasing(image * 2.0 - 1.0, (size, size)) + 1.0) / 2.0
    pixels = processor(images=image, do_normalize=True, do_center_crop=False, do_resize=False, do_rescale=False,
                       return_tensors="pt").pixel_values  # fmt: skip
    with torch.no_grad():
        embeds = encoder(pixels.to(device=device, dtype=next(encoder.parameters()).dtype)).image_embeds
    return embeds[:, None].float().cpu()
