"""The ``wan-animate`` render backend: Wan2.2-Animate (diffusers components) driven by the cached
pose latents, prompt embeddings, reference latents and image tokens.

Per render (``frames``): load the guidance and persona sub-caches (building them first if missing
or stale: the only place encoders run), build the face video, then per inference segment denoise
with our loop (:mod:`.denoise`) and decode, streaming frames out one by one.

Face video: square crops around the retargeted face keypoints of the ``warp`` backend's frames
(which move the persona's own face along the loop), resized to the motion encoder's size, with a
fixed crop size per clip (no zoom jitter).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from newsmotion_engine import cachedir
from newsmotion_engine.errors import NewsmotionError
from newsmotion_engine.render.base import BackendNeeds, InvalidSpecError, RenderSpec
from newsmotion_engine.render.wan_animate import caches as C
from newsmotion_engine.render.wan_animate.config import RANDOM_WEIGHTS_LABEL, WanAnimateOptions
from newsmotion_engine.skeleton import FACE_START

__all__ = ["WanAnimateBackend", "WanAnimateOOMError", "loop_prompt"]

log = logging.getLogger(__name__)
NAME = "wan-animate"


class WanAnimateOOMError(NewsmotionError, RuntimeError):
    """The GPU ran out of memory; the message names the settings that reduce memory."""


def loop_prompt(guidance: Any, override: str | None = None) -> str:
    """The text prompt for a loop: the option override, the canonical loop's prompt, or a default."""
    if override:
        return override
    from newsmotion_engine.guidance.palette import canonical_loops

    spec = canonical_loops().get(getattr(guidance, "loop_id", ""))
    return spec.prompt if spec is not None else C.DEFAULT_PROMPT


class WanAnimateBackend:
    """See the module docstring. Construct with :func:`WanAnimateBackend.from_options` (what the
    registry factory does): ``get_backend("wan-animate", preset="tiny", steps=2)``."""

    name = NAME
    needs = BackendNeeds(
        guidance=frozenset({"keypoints", "pose_latents", "prompt_embeds"}),
        persona=frozenset({"portrait", "person_mask", "face_mask", "landmarks", "ref_latents", "image_tokens"}),
    )

    def __init__(self, options: WanAnimateOptions) -> None:
        self.options = options
        self.components: Any = None
        self.accel_report: dict[str, Any] = {}
        self.last_render: dict[str, Any] = {}
        self._warp: Any = None

    @classmethod
    def from_options(cls, **options: Any) -> WanAnimateBackend:
        return cls(WanAnimateOptions.from_mapping(options))

    # ------------------------------------------------------------------ lifecycle
    def load(self) -> None:
        """Load transformer + VAE and apply the configured accelerations (once)."""
        if self.components is not None:
            return
        from newsmotion_engine.render.wan_animate.components import load_render_components

        t0 = time.perf_counter()
        self.components = load_render_components(self.options)
        self.accel_report = apply_accelerations(self.components, self.options)
        self.accel_report["load_s"] = round(time.perf_counter() - t0, 3)
        if self.components.identity["weights"] == RANDOM_WEIGHTS_LABEL:
            log.warning("wan-animate: preset %r with RANDOM WEIGHTS: frames are noise, for timing only", self.options.preset)

    def close(self) -> None:
        """Drop the models and free GPU memory. Idempotent."""
        if self.components is None:
            return
        device = self.components.device
        self.components = None
        import gc

        gc.collect()
        if getattr(device, "type", "cpu") == "cuda":
            import torch

            torch.cuda.empty_cache()

    def describe(self) -> dict[str, Any]:
        o = self.options
        info: dict[str, Any] = {
            "weights": self.components.weights_label if self.components else (f"folder {o.model_path}" if o.model_path else RANDOM_WEIGHTS_LABEL),
            "preset": None if o.model_path else o.preset,
            "device": str(self.components.device) if self.components else o.device,
            "dtype": o.dtype,
            "steps": o.steps,
            "guidance_scale": o.guidance_scale,
            "segment_frames": o.segment_length,
            "accelerations": o.accel_summary(),
            "pose_video": "loop keypoints drawn DWPose-style (Tier-1 guidance cache)",
            "face_video": "face crops of the warp backend's frames",
            "continuation": "latent (no VAE encode at render time)",
        }
        if self.components is not None:
            info["model_digest"] = self.components.identity["digest"]
        if self.accel_report:
            info["accel_report"] = self.accel_report
        if self.last_render:
            info["last_render"] = self.last_render
        if info["weights"] == RANDOM_WEIGHTS_LABEL:
            info["note"] = "random weights: frames are noise-shaped; use for timing and memory only"
        return info

    # ------------------------------------------------------------------ caches
    def _check_spec(self, spec: RenderSpec) -> None:
        if spec.width % 16 or spec.height % 16:
            raise InvalidSpecError(
                f"wan-animate renders sizes divisible by 16 (VAE x8, patch x2); {spec.width}x{spec.height} is not, "
                f"e.g. use {spec.width // 16 * 16}x{spec.height // 16 * 16}"
            )

    def _cache_root(self) -> Path | None:
        return Path(self.options.cache_root) if self.options.cache_root else None

    def guidance_params(self, guidance: Any, spec: RenderSpec, plan: C.SegmentPlan) -> tuple[dict, dict]:
        """(source, params) of the guidance sub-cache for this loop, size and model."""
        o = self.options
        source = {"kind": "guidance", "sha256": C.source_digest(guidance)}
        params = {
            "format": C.FORMAT_VERSION,
            "size": [spec.width, spec.height],
            "segments": plan.as_dict(),
            "model": self.components.identity["digest"],
            "prompt": loop_prompt(guidance, o.prompt),
            "negative_prompt": o.negative_prompt,
        }
        return source, params

    def persona_params(self, persona: Any, spec: RenderSpec) -> tuple[dict, dict]:
        source = {"kind": "persona", "sha256": C.source_digest(persona)}
        params = {
            "format": C.FORMAT_VERSION,
            "size": [spec.width, spec.height],
            "background": list(spec.background),
            "model": self.components.identity["digest"],
        }
        return source, params

    def prepare(self, guidance: Any, persona: Any, spec: RenderSpec) -> dict[str, str]:
        """Build (or validate) both sub-caches for this pair and size; ``{"guidance": "built" |
        "reused", "persona": ...}``. The only place the VAE encoder, image encoder and text encoder
        run; call it from the cache-building assets so renders find the caches ready."""
        self.load()
        self._check_spec(spec)
        plan = C.plan_segments(int(np.asarray(guidance.keypoints).shape[0]), self.options.segment_length, self.options.prev_frames)
        _, g_state = self._guidance_cache(guidance, spec, plan)
        _, p_state = self._persona_cache(persona, spec)
        return {"guidance": g_state, "persona": p_state}

    def _guidance_cache(self, guidance: Any, spec: RenderSpec, plan: C.SegmentPlan):
        path = C.guidance_artifacts_dir(Path(guidance.path), spec.width, spec.height, self._cache_root())
        source, params = self.guidance_params(guidance, spec, plan)
        state = C.ensure_cache(path, C.GUIDANCE_SCHEMA, source, params,
                               lambda: self._build_guidance(path, guidance, spec, plan, source, params))  # fmt: skip
        h, w, t = spec.height // 8, spec.width // 8, plan.latent_frames
        tensors = {
            **C.load_tensors(path / "pose_latents.safetensors", {"pose_latents": (plan.segments, 16, t, h, w)}),
            **C.load_tensors(path / "cond0_latents.safetensors", {"cond0_latents": (1, 20, t, h, w)}),
            **C.load_tensors(path / "prompt_embeds.safetensors", {"prompt": (1, C.TEXT_TOKENS, None), "negative": (1, C.TEXT_TOKENS, None)}),
        }
        return tensors, state

    def _build_guidance(self, path: Path, guidance: Any, spec: RenderSpec, plan: C.SegmentPlan, source: dict, params: dict) -> None:
        import torch

        from newsmotion_engine.guidance.draw import draw_pose
        from newsmotion_engine.render.wan_animate.components import load_text_encoder

        comps = self.components
        kp = np.asarray(guidance.keypoints)
        T = kp.shape[0]
        poses = []
        for k in range(plan.segments):
            start = plan.start(k)
            # Cyclic continuation past the end: the loops are seamless.
            frames = np.stack([draw_pose(kp[(start + j) % T], spec.width, spec.height) for j in range(plan.segment_frames)])
            poses.append(C.vae_encode(comps.vae, C.to_video_tensor(frames), comps.device))
        zeros = torch.zeros(1, 3, plan.segment_frames, spec.height, spec.width)
        cond0 = torch.cat([C.i2v_mask(plan.latent_frames, spec.height // 8, spec.width // 8, 0),
                           C.vae_encode(comps.vae, zeros, comps.device)], dim=1)  # fmt: skip
        tok, enc = load_text_encoder(self.options, comps.device)
        try:
            emb = C.encode_prompts(tok, enc, [params["prompt"], params["negative_prompt"]], comps.device)
        finally:
            del enc  # the text encoder lives only while building caches
            if comps.device.type == "cuda":
                torch.cuda.empty_cache()

        def build(tmp: Path) -> None:
            meta = {"weights": comps.weights_label}
            C.save_tensors(tmp / "pose_latents.safetensors", {"pose_latents": torch.cat(poses)}, meta)
            C.save_tensors(tmp / "cond0_latents.safetensors", {"cond0_latents": cond0}, meta)
            C.save_tensors(tmp / "prompt_embeds.safetensors", {"prompt": emb[0:1], "negative": emb[1:2]}, meta)

        cachedir.write_cache(path, build, schema=C.GUIDANCE_SCHEMA, source=source, params=params,
                             extra={"backend": NAME, "weights": comps.weights_label})  # fmt: skip

    def _persona_cache(self, persona: Any, spec: RenderSpec):
        path = C.persona_artifacts_dir(Path(persona.path), spec.width, spec.height, self._cache_root())
        source, params = self.persona_params(persona, spec)
        state = C.ensure_cache(path, C.PERSONA_SCHEMA, source, params,
                               lambda: self._build_persona(path, persona, spec, source, params))  # fmt: skip
        h, w = spec.height // 8, spec.width // 8
        tensors = {
            **C.load_tensors(path / "ref_latents.safetensors", {"ref_latents": (1, 20, 1, h, w)}),
            **C.load_tensors(path / "image_tokens.safetensors", {"image_tokens": (1, None, None)}),
        }
        return tensors, state

    def _build_persona(self, path: Path, persona: Any, spec: RenderSpec, source: dict, params: dict) -> None:
        import torch

        from newsmotion_engine.render.wan_animate.components import load_image_encoder

        comps = self.components
        frame = C.reference_frame(persona, spec.width, spec.height, spec.background)
        ref = C.vae_encode(comps.vae, C.to_video_tensor(frame[None]), comps.device)
        ref_latents = torch.cat([C.i2v_mask(1, spec.height // 8, spec.width // 8, 1), ref], dim=1)
        proc, enc = load_image_encoder(self.options, comps.device)
        try:
            tokens = C.encode_image_tokens(proc, enc, frame, comps.device)
        finally:
            del enc

        def build(tmp: Path) -> None:
            meta = {"weights": comps.weights_label}
            C.save_tensors(tmp / "ref_latents.safetensors", {"ref_latents": ref_latents}, meta)
            C.save_tensors(tmp / "image_tokens.safetensors", {"image_tokens": tokens}, meta)

        cachedir.write_cache(path, build, schema=C.PERSONA_SCHEMA, source=source, params=params,
                             extra={"backend": NAME, "weights": comps.weights_label})  # fmt: skip

    # ------------------------------------------------------------------ face video
    def face_video(self, guidance: Any, persona: Any, keypoints: np.ndarray, spec: RenderSpec) -> np.ndarray:
        """uint8 ``[T, S, S, 3]``: crops of the warp backend's frames around the face."""
        import cv2

        from newsmotion_engine.render.base import get_backend
        from newsmotion_engine.render.warp import place_portrait

        size = int(self.components.transformer.config.motion_encoder_size)
        if self._warp is None:
            self._warp = get_backend("warp")
            self._warp.load()
        kp = np.asarray(keypoints, np.float64)
        ox, oy, pw, ph = place_portrait(np.asarray(persona.portrait).shape[:2], spec.width, spec.height)
        face = kp[:, FACE_START : FACE_START + 68]
        ok = face[..., 2] > 0.3
        px = np.stack([ox + face[..., 0] * pw, oy + face[..., 1] * ph], axis=-1)
        centres, extents = [], []
        for t in range(kp.shape[0]):
            pts = px[t][ok[t]] if ok[t].sum() >= 3 else None
            if pts is None:
                centres.append(centres[-1] if centres else (spec.width / 2, spec.height / 4))
                continue
            lo, hi = pts.min(axis=0), pts.max(axis=0)
            centres.append(tuple((lo + hi) / 2))
            extents.append(float(max(hi - lo)))
        side = 1.6 * (float(np.median(extents)) if extents else spec.width / 4)
        out = np.empty((kp.shape[0], size, size, 3), np.uint8)
        for t, frame in enumerate(self._warp.frames(guidance, persona, keypoints, spec)):
            cx, cy = centres[t]
            s = size / side
            m = np.array([[s, 0, size / 2 - s * cx], [0, s, size / 2 - s * cy]], np.float64)
            out[t] = cv2.warpAffine(frame, m, (size, size), flags=cv2.INTER_AREA if s < 1 else cv2.INTER_LINEAR,
                                    borderMode=cv2.BORDER_REPLICATE)  # fmt: skip
        return out

    # ------------------------------------------------------------------ render
    def frames(self, guidance: Any, persona: Any, keypoints: np.ndarray, spec: RenderSpec) -> Iterator[np.ndarray]:
        """Yield the clip's frames (uint8 RGB ``[H, W, 3]``), one segment decoded at a time."""
        self.load()
        self._check_spec(spec)
        try:
            yield from self._frames(guidance, persona, keypoints, spec)
        except Exception as exc:  # only CUDA OOM is translated; everything else propagates as is
            if type(exc).__name__ == "OutOfMemoryError":
                raise WanAnimateOOMError(self._oom_message(spec)) from exc
            raise

    def _oom_message(self, spec: RenderSpec) -> str:
        o = self.options
        tips = []
        if o.fp8 == "off":
            tips.append("fp8='auto' (halves transformer weights)")
        if not o.vae_tiling:
            tips.append("vae_tiling=True")
        if o.ffn_chunks == 0:
            tips.append("ffn_chunks=8")
        if o.compile == "blocks-cudagraphs":
            tips.append("compile='blocks' (CUDA graphs keep static buffers)")
        tips.append(f"a shorter segment_frames (now {o.segment_length})")
        tips.append(f"a smaller render size (now {spec.width}x{spec.height})")
        return f"wan-animate ran out of GPU memory at {spec.width}x{spec.height}; reduce memory with: " + ", ".join(tips)

    def _frames(self, guidance: Any, persona: Any, keypoints: np.ndarray, spec: RenderSpec) -> Iterator[np.ndarray]:
        import torch

        from newsmotion_engine.accel.cfg import CFGConfig, CFGStrategy
        from newsmotion_engine.accel.teacache import reset_teacache, teacache_stats
        from newsmotion_engine.render.wan_animate.denoise import (
            SegmentInputs,
            decode_latents,
            denoise_segment,
            latent_continuation,
        )

        o, comps = self.options, self.components
        dev, dtype = comps.device, comps.dtype
        T = int(np.asarray(keypoints).shape[0])
        plan = C.plan_segments(T, o.segment_length, o.prev_frames)
        t0 = time.perf_counter()
        g, g_state = self._guidance_cache(guidance, spec, plan)
        p, p_state = self._persona_cache(persona, spec)
        faces = self.face_video(guidance, persona, keypoints, spec)
        prep_s = time.perf_counter() - t0

        cfg_conf = CFGConfig(scale=o.guidance_scale, start=o.cfg_start, stop=o.cfg_stop, every=o.cfg_every, momentum=o.cfg_momentum)
        use_cfg = cfg_conf.enabled
        h, w = spec.height // 8, spec.width // 8
        cont_mask = C.i2v_mask(plan.latent_frames, h, w, o.prev_frames)
        gen = torch.Generator("cpu").manual_seed(spec.seed)
        emitted = 0
        previous = None
        stats = {"segments": plan.segments, "denoise_s": 0.0, "decode_s": 0.0, "cond_passes": 0, "uncond_passes": 0,
                 "plain_cfg_passes": 0}  # fmt: skip
        common = dict(
            prompt_embeds=g["prompt"].to(dev, dtype),
            negative_embeds=g["negative"].to(dev, dtype) if use_cfg else None,
            image_embeds=p["image_tokens"].to(dev, dtype),
        )
        reset_teacache(comps.transformer)
        for k in range(plan.segments):
            start = plan.start(k)
            idx = [(start + j) % T for j in range(plan.segment_frames)]
            face = C.to_video_tensor(faces[idx]).to(dev, dtype)
            cond = g["cond0_latents"] if k == 0 else latent_continuation(g["cond0_latents"], previous, o.prev_frames, cont_mask)
            inputs = SegmentInputs(
                reference_latents=torch.cat([p["ref_latents"], cond], dim=2).to(dev, torch.float32),
                pose_latents=g["pose_latents"][k : k + 1].to(dev, dtype),
                face_pixels=face,
                **common,
            )
            latents = torch.randn((1, 16, plan.latent_frames + 1, h, w), generator=gen, dtype=torch.float32).to(dev)
            strategy = CFGStrategy(cfg_conf, o.steps)
            reset_teacache(comps.transformer)  # a new trajectory: nothing carries over
            t1 = time.perf_counter()
            with torch.no_grad():
                latents = denoise_segment(comps.transformer, comps.new_scheduler(), latents, inputs, steps=o.steps, cfg=strategy, dtype=dtype)
            tc = teacache_stats(comps.transformer)
            stats.setdefault("teacache_computed", 0)
            stats.setdefault("teacache_skipped", 0)
            stats["teacache_computed"] += tc["computed"]
            stats["teacache_skipped"] += tc["skipped"]
            if dev.type == "cuda":
                torch.cuda.synchronize()
            t2 = time.perf_counter()
            video = decode_latents(comps.vae, latents)
            t3 = time.perf_counter()
            stats["denoise_s"] += t2 - t1
            stats["decode_s"] += t3 - t2
            for key, val in strategy.stats().items():
                if key != "flops_saved":
                    stats[key] += val
            previous = latents[:, :, 1:].cpu()
            for frame in video[0 if k == 0 else o.prev_frames :]:
                if emitted >= T:
                    break
                emitted += 1
                yield np.ascontiguousarray(frame)
        stats["prep_s"] = prep_s
        stats["caches"] = {"guidance": g_state, "persona": p_state}
        plain = stats["plain_cfg_passes"]
        stats["cfg_flops_saved"] = round(1 - (stats["cond_passes"] + stats["uncond_passes"]) / plain, 4) if plain else 0.0
        for key in ("denoise_s", "decode_s", "prep_s"):
            stats[key] = round(stats[key], 3)
        self.last_render = stats


def apply_accelerations(comps: Any, o: WanAnimateOptions) -> dict[str, Any]:
    """Apply the configured accelerations to loaded components, in a fixed order (FP8 -> FFN
    chunking -> attention -> TeaCache -> compile last, so it sees the final modules)."""
    from newsmotion_engine.accel import memory
    from newsmotion_engine.accel.fp8 import module_weight_gib

    report: dict[str, Any] = {"weight_gib_loaded": round(module_weight_gib(comps.transformer), 3)}
    tr = comps.transformer
    if o.fp8 != "off":
        from newsmotion_engine.accel.fp8 import quantize_fp8

        report["fp8"] = quantize_fp8(tr, mode=o.fp8)
        if report["fp8"]["fallback"]:
            log.warning("wan-animate: %s", report["fp8"]["fallback"])
    if o.ffn_chunks:
        report["ffn_chunked_blocks"] = memory.chunk_feed_forward(tr, o.ffn_chunks)
    if o.attention != "sdpa":
        from newsmotion_engine.accel.attention import set_attention

        report["attention"] = set_attention(tr, o.attention, variant=o.fp8_attention_variant)
    if o.teacache > 0 or o.teacache_record:
        from newsmotion_engine.accel.teacache import TeaCacheConfig, apply_teacache

        apply_teacache(
            tr,
            TeaCacheConfig(
                threshold=o.teacache,
                warmup_steps=o.teacache_warmup,
                coefficients=o.teacache_coefficients,
                record=o.teacache_record,
            ),
        )
        report["teacache"] = {"threshold": o.teacache, "coefficients": list(o.teacache_coefficients), "record": o.teacache_record}
    if o.vae_tiling:
        report["vae"] = memory.enable_vae_tiling(comps.vae)
    if o.compile != "off":
        from newsmotion_engine.accel.compile import compile_blocks

        report["compile"] = compile_blocks(tr, cudagraphs=o.compile == "blocks-cudagraphs")
    report["weight_gib"] = round(module_weight_gib(tr), 3)
    return report
