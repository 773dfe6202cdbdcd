"""The ``wan-animate-2`` render backend: Wan-Animate-2 (diffusers 0.42.1's components) driven by
the two-tier caches, with the reference K/V extracted, read from an FP8 file, or kept on the GPU.

Tiers (formats in :mod:`.caches`):

- Tier 1, per (loop, resolution): every segment's extract-pass inputs — the driving segment's VAE
  latents and i2v condition, the CLIP features of the driving video's first frame, the
  reference-prompt embeddings — plus the negative-prompt embeddings and the first segment's
  generation conditioning. Built by :meth:`WanAnimate2Backend.prepare_guidance` (the only place
  the VAE encoder, CLIP and the text encoder run for a loop); with ``reference_kv="fp8-file"`` it
  also runs the extract passes and writes the K/V.
- Tier 2, per persona: the reference image's latents and CLIP tokens, and the prompt's embeddings
  (:meth:`prepare_persona`): the prompt describes the person (the ``prompt`` option, else the
  persona's caption, :mod:`.caption`), so it cannot be shared by every persona of a loop.

Renders only load them (``frames`` raises ``BackendCacheError`` naming what to materialize).

Driving video for a loop: a real video of a person performing it, the loop's *driving clip*
(:mod:`newsmotion_engine.guidance.driver`): the user's own clip if given, else a custom loop's
source video, else — for a canonical loop, which has no video — the weights-free warp backend's
render of a fixed driver portrait performing the loop on grey. Wan-Animate-2 was trained on raw
RGB video of people (the stock pipeline takes an mp4, no pose extraction); a stick-figure drawing
is not what it was trained on, and its first frame, the CLIP context of the extract pass, would be
a drawing. The clip is persona-free (the driver is fixed), so Tier 1 stays per loop; it is built
once per (loop, size) and read here.

Timing: the model runs at 24 fps (:data:`~newsmotion_engine.guidance.driver.MODEL_FPS`). A clip of
``T`` frames (the loop's count) is generated as ``round(T * 24 / loop fps)`` frames driven by the
24 fps clip, then re-timed to ``T`` frames by blending the two neighbouring generated frames
(:func:`retime_frames`; the loop is seamless, so the last frames blend towards frame 0). Flow
infill (``video/infill.py``) interpolates integer ratios only and costs two DIS flows per frame;
24 -> 30 is 4:5, where a linear blend is one multiply-add per pixel and moves nothing that the
model did not paint.

Reference K/V (``reference_kv``): see :mod:`.config`; :meth:`reference_kv_source` is the one place
the three options differ, and ``last_render["kv"]`` reports where each segment's came from and its bytes.

Lifecycle, sub-cache locations and keys, ``prepare_*`` / ``load_*`` and the out-of-memory message
are :class:`~newsmotion_engine.render.backends.wan.diffusers_backend.DiffusersBackend`'s (shared with
wan-animate); this module holds what is wan-animate-2's own.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from newsmotion_engine import cachedir
from newsmotion_engine.errors import CacheError
from newsmotion_engine.guidance.driver import MODEL_FPS, loop_fps, model_frame_count
from newsmotion_engine.render.base import BACKGROUND_CHROMA_GREEN, BackendNeeds, RenderSpec
from newsmotion_engine.render.backends.wan.diffusers_backend import DiffusersBackend, DiffusersOOMError
from newsmotion_engine.render.backends.wan_animate_2 import caches as C
from newsmotion_engine.render.backends.wan_animate_2.caption import persona_caption
from newsmotion_engine.render.backends.wan_animate_2.config import NAME, WanAnimate2Options
from newsmotion_engine.render.backends.wan import artifacts, continuation, encoders, segments
from newsmotion_engine.render.backends.wan.retime import retime_frames

__all__ = ["WanAnimate2Backend", "WanAnimate2OOMError", "retime_frames"]


class WanAnimate2OOMError(DiffusersOOMError):
    """The GPU ran out of memory; the message names the settings that reduce memory."""


class WanAnimate2Backend(DiffusersBackend):
    """See the module docstring. ``get_backend("wan-animate-2", preset="tiny", device="cpu")``."""

    name = NAME
    needs = BackendNeeds(
        guidance=frozenset({"keypoints", "driving_clip", "driving_condition", "clip_context", "prompt_ref_embeds"}),
        persona=frozenset({"portrait", "person_mask", "ref_latents", "image_tokens", "prompt_embeds"}),
    )
    options_class = WanAnimate2Options
    caches = C
    oom_error = WanAnimate2OOMError
    driven_by_clip = True
    retimes_to_loop_rate = True

    def __init__(self, options: WanAnimate2Options) -> None:
        super().__init__(options)
        self.kv_lru: Any = None  # kv.KVLru with reference_kv="gpu-lru"
        self.last_prompt: str | None = None  # the prompt (caption) of the last render, for describe()

    # ------------------------------------------------------------------ lifecycle
    def _load_components(self) -> Any:
        from newsmotion_engine.render.backends.wan_animate_2.components import load_render_components

        return load_render_components(self.options)

    def _loaded(self) -> None:
        from newsmotion_engine.render.backends.wan_animate_2.kv import KVLru

        if self.options.reference_kv == "gpu-lru":
            self.kv_lru = KVLru(int(self.options.kv_lru_gib * 2**30))
        if self.options.continuation == "frames":
            from newsmotion_engine.render.backends.wan.zero_tail import steady_plan

            # Which calls of a continuation's encode the zeros alone decide (wan/zero_tail.py),
            # worked out with the model rather than in the first render.
            steady_plan(self.components.vae, self.options.segment_length, self.options.prev_frames)

    def _released(self) -> None:
        if self.kv_lru is not None:
            self.kv_lru.clear()
            self.kv_lru = None

    def _settings(self) -> dict[str, Any]:
        o = self.options
        return {
            "schedule": o.schedule,
            "steps": o.num_steps,
            "guidance_scale": o.cfg_scale,
            "segment_frames": o.segment_length,
            "fit_segments": o.fit_segments,
            "prev_frames": o.prev_frames,
            "continuation": continuation.DESCRIPTIONS[o.continuation],
            "prompt": o.prompt if o.prompt else f"persona caption (render/backends/wan_animate_2/caption.py), e.g. {persona_caption(None, BACKGROUND_CHROMA_GREEN)!r}",
            "negative_prompt": o.negative_prompt,
            "prompt_ref": o.prompt_ref,
            "reference_kv": o.reference_kv,
            "kv_fp8": o.kv_fp8 or o.kv_offload or o.reference_kv == "fp8-file" or o.has("attention"),
            "kv_offload": o.kv_offload,
            "accelerations": o.accel_summary(),
            "driving_video": f"the loop's driving clip at {MODEL_FPS} fps (guidance/driver.py: user clip, custom loop's source "
                             "video, or the warp render of the fixed driver portrait); CLIP context from its first frame",
            "model_fps": MODEL_FPS,
            "retime": f"{MODEL_FPS} fps -> spec.fps by blending neighbouring generated frames",
            "chroma": o.chroma,
            **({"prompt_used": self.last_prompt} if self.last_prompt else {}),
        }

    # ------------------------------------------------------------------ caches
    def plan(self, frames: int) -> segments.SegmentPlan:
        o = self.options
        length = segments.fitted_segment_frames(frames, o.segment_length, o.prev_frames) if o.fit_segments else o.segment_length
        return segments.plan_segments(frames, length, o.prev_frames)

    def geometry(self, spec: RenderSpec, plan: segments.SegmentPlan):
        from newsmotion_engine.render.backends.wan_animate_2.denoise import geometry

        return geometry(plan.segment_frames, spec.width, spec.height)

    def _loop_frames(self, guidance: Any, spec: RenderSpec) -> int:
        """Tier 1 is planned for the loop's frames at the model's 24 fps (its driving clip's)."""
        return model_frame_count(len(np.asarray(guidance.keypoints)), loop_fps(guidance))

    def _guidance_params_extra(self, spec: RenderSpec) -> dict[str, Any]:
        return {"prompt_ref": self.options.prompt_ref, "driving": "driving clip"}

    def guidance_params(self, guidance: Any, spec: RenderSpec, plan: Any) -> tuple[dict, dict]:
        """The shared params (the driving clip's origin and digest among them: a new clip makes
        Tier 1 stale) less the prompt (Tier 2 holds it)."""
        source, params = super().guidance_params(guidance, spec, plan)
        params.pop("prompt", None)
        return source, params

    def prompt_text(self, persona: Any, spec: RenderSpec) -> str:
        """The prompt of a render of ``persona``: the option, else the persona's caption."""
        return self.options.prompt or persona_caption(persona, spec.background)

    def persona_params(self, persona: Any, spec: RenderSpec) -> tuple[dict, dict]:
        source, params = super().persona_params(persona, spec)
        return source, {**params, "prompt": self.prompt_text(persona, spec)}

    def kv_params(self, tier1_digest: str) -> tuple[dict, dict]:
        """The FP8 K/V file's key: the Tier-1 cache it was extracted from and what shapes the
        transformer's K/V (weights, dtype, FP8 linears)."""
        o = self.options
        return ({"kind": "wan-animate-2-guidance", "digest": tier1_digest},
                {"format": C.FORMAT_VERSION, "model": self.components.identity["digest"], "dtype": o.dtype,
                 "fp8_linears": o.accel_summary().get("fp8")})  # fmt: skip

    def _prepared_guidance(self, path: Path, plan: segments.SegmentPlan, spec: RenderSpec) -> bool:
        """With ``reference_kv="fp8-file"``, :meth:`prepare_guidance` also runs the extract passes
        over Tier 1 and writes the FP8 K/V (built when missing or stale)."""
        return self.options.reference_kv == "fp8-file" and self._prepare_kv_file(path, plan, spec)

    def _tier1_digest(self, path: Path) -> str:
        return cachedir.cache_digest(cachedir.read_metadata(path, C.GUIDANCE_SCHEMA))

    # ------------------------------------------------------------------ builds
    def _driving_frames(self, guidance: Any, spec: RenderSpec, plan: segments.SegmentPlan, segment: int) -> np.ndarray:
        """uint8 ``[L, H, W, 3]``: the segment's frames of the loop's 24 fps driving clip, cyclic
        past the end."""
        from newsmotion_engine.guidance.driver import load_driving_clip

        frames = load_driving_clip(guidance, spec.width, spec.height).frames
        start = plan.start(segment)
        return np.stack([frames[(start + j) % frames.shape[0]] for j in range(plan.segment_frames)])

    def _build_guidance(self, path: Path, guidance: Any, spec: RenderSpec, plan: segments.SegmentPlan, source: dict, params: dict) -> None:
        import torch
        from diffusers.modular_pipelines.wan_animate_2.encoders import clip_visual_encode, encode_vae, get_i2v_mask, get_t5_prompt_embeds

        from newsmotion_engine.render.backends.wan_animate_2.components import load_image_encoder, load_text_encoder

        comps, dev = self.components, self.components.device
        geom = self.geometry(spec, plan)
        conds, first = [], None
        with torch.no_grad():
            for k in range(plan.segments):
                pixels = _pixels(self._driving_frames(guidance, spec, plan, k)).to(dev)
                if k == 0:
                    first = pixels[0, :, 0]
                lat = encode_vae(comps.vae, pixels)[0].float()
                mask = get_i2v_mask(lat.shape[1], geom.latent_h, geom.latent_w, plan.segment_frames, device=dev)
                conds.append(torch.cat([mask, lat], dim=0).cpu())
            zeros = torch.zeros(1, 3, plan.segment_frames, spec.height, spec.width, device=dev)
            zlat = encode_vae(comps.vae, zeros)[0].float()
            gen = torch.cat([get_i2v_mask(zlat.shape[1], geom.latent_h, geom.latent_w, 0, device=dev), zlat], dim=0).cpu()
            enc = load_image_encoder(self.options, dev)
            try:
                clip = clip_visual_encode(enc, first, dev, enc.dtype).float().cpu()
            finally:
                del enc
            tok, te = load_text_encoder(self.options, dev)
            try:
                texts = {name: get_t5_prompt_embeds(te, tok, params[key], encoders.TEXT_TOKENS, dev).float().cpu()
                         for name, key in (("negative", "negative_prompt"), ("ref", "prompt_ref"))}  # fmt: skip
            finally:
                del te
                if dev.type == "cuda":
                    torch.cuda.empty_cache()
        built = C.GuidanceArtifacts(torch.stack(conds).numpy(), clip.numpy(), gen.numpy(), texts["negative"].numpy(),
                                        texts["ref"].numpy())  # fmt: skip
        C.write_guidance_artifacts(path, built, source=source, params=params, extra=self._cache_extra())

    def _build_persona(self, path: Path, persona: Any, spec: RenderSpec, source: dict, params: dict) -> None:
        import torch
        from diffusers.modular_pipelines.wan_animate_2.encoders import clip_visual_encode, encode_vae, get_i2v_mask, get_t5_prompt_embeds

        from newsmotion_engine.render.backends.wan_animate_2.components import load_image_encoder, load_text_encoder

        comps, dev = self.components, self.components.device
        frame = artifacts.reference_frame(persona, spec.width, spec.height, spec.background)
        pixels = _pixels(frame[None]).to(dev)  # [1, 3, 1, H, W]
        with torch.no_grad():
            lat = encode_vae(comps.vae, pixels)[0].float()
            ref = torch.cat([get_i2v_mask(1, spec.height // 8, spec.width // 8, 1, device=dev), lat], dim=0).cpu()
            enc = load_image_encoder(self.options, dev)
            try:
                tokens = clip_visual_encode(enc, pixels[0, :, 0], dev, enc.dtype).float().cpu()
            finally:
                del enc
            tok, te = load_text_encoder(self.options, dev)
            try:
                prompt = get_t5_prompt_embeds(te, tok, params["prompt"], encoders.TEXT_TOKENS, dev).float().cpu()
            finally:
                del te
                if dev.type == "cuda":
                    torch.cuda.empty_cache()
        C.write_persona_artifacts(path, C.PersonaArtifacts(ref.numpy(), tokens.numpy(), prompt.numpy()), source=source,
                                  params=params, extra={**self._cache_extra(), "prompt": params["prompt"]})  # fmt: skip

    def _prepare_kv_file(self, tier1: Path, plan: segments.SegmentPlan, spec: RenderSpec) -> bool:
        from newsmotion_engine.render.backends.wan_animate_2 import kv as K

        source, params = self.kv_params(self._tier1_digest(tier1))
        path = C.kv_cache_dir(tier1)
        read = lambda: C.read_kv_segment(path, plan.segments, 0, source, params)  # noqa: E731

        def build() -> None:
            g = C.read_guidance_artifacts(tier1, *self.guidance_params_from_meta(tier1), plan, spec.width, spec.height)
            packed = [K.kv_to_file(self._extract(g, k, spec, plan)) for k in range(plan.segments)]
            C.write_kv_cache(path, packed, source=source, params=params, extra=self._cache_extra())

        _, built = cachedir.ensure(path, read, build)
        return built

    def guidance_params_from_meta(self, tier1: Path) -> tuple[dict, dict]:
        meta = cachedir.read_metadata(tier1, C.GUIDANCE_SCHEMA)
        return meta["source"], meta["params"]

    # ------------------------------------------------------------------ reference K/V
    def _extract(self, g: C.GuidanceArtifacts, segment: int, spec: RenderSpec, plan: segments.SegmentPlan):
        import torch

        from newsmotion_engine.render.backends.wan_animate_2 import denoise as D
        from newsmotion_engine.render.backends.wan_animate_2.kv import fp8_cache

        comps, o = self.components, self.options
        dev, dtype = comps.device, comps.dtype
        t = lambda a: artifacts.as_tensor(a).to(dev, dtype)  # noqa: E731
        # FP8 (and offloaded) layers quantize as the extract pass stores each layer's K/V.
        # Under the 8-bit in-context attention a cache that no file is written from is stored
        # straight in that kernel's form (kv.py: 8-bit, whatever kv_fp8 says — the kernel reads
        # nothing else, and a model-dtype cache would be converted again in every step); the FP8
        # file keeps the raw FP8 format.
        kernel_form = o.has("attention") and o.reference_kv != "fp8-file"
        target = (fp8_cache(comps.transformer.config.num_layers, offload=o.kv_offload, kernel_form=kernel_form)
                  if (kernel_form or o.kv_fp8 or o.kv_offload) else None)  # fmt: skip
        with torch.no_grad():
            return D.extract_reference_kv(comps.transformer, t(g.driving_condition[segment]), t(g.prompt_ref_embeds),
                                          t(g.clip_context), self.geometry(spec, plan), cache=target)  # fmt: skip

    def reference_kv_source(self, guidance: Any, g: C.GuidanceArtifacts, spec: RenderSpec, plan: segments.SegmentPlan):
        """``segment -> (filled K/V cache, how)`` for the configured ``reference_kv``; records each
        segment's source and bytes in ``self._kv_log``."""
        from newsmotion_engine.render.backends.wan_animate_2 import kv as K

        mode = self.options.reference_kv
        tier1 = self._guidance_dir(guidance, spec)
        self._kv_log: list[dict[str, Any]] = []
        kv_file = None
        if mode == "fp8-file":
            source, params = self.kv_params(self._tier1_digest(tier1))
            kv_file = (C.kv_cache_dir(tier1), source, params)
            try:
                C.read_kv_segment(kv_file[0], plan.segments, 0, source, params)
            except CacheError as exc:
                raise self._not_ready(exc, "guidance", getattr(guidance, "loop_id", tier1.parent.parent.name), spec) from None

        def source_fn(segment: int):
            if mode == "fp8-file":
                data, scale = C.read_kv_segment(kv_file[0], plan.segments, segment, kv_file[1], kv_file[2])
                cache = K.kv_from_file(data, scale, self.components.device, self.components.dtype, offload=self.options.kv_offload)
                how = "fp8-file"
            elif mode == "gpu-lru":
                key = (str(tier1), self._tier1_digest(tier1), segment, self.components.identity["digest"])
                cache = self.kv_lru.get(key)
                how = "lru-hit"
                if cache is None:
                    cache, how = self._extract(g, segment, spec, plan), "extract"
                    if not self.kv_lru.put(key, cache):
                        how = "extract (larger than kv_lru_gib; not kept)"
            else:
                cache, how = self._extract(g, segment, spec, plan), "extract"
            self._kv_log.append({"segment": segment, "source": how, "bytes": K.kv_bytes(cache), "device_bytes": K.device_bytes(cache)})
            return cache, how

        return source_fn

    # ------------------------------------------------------------------ render
    def _memory_tips(self, spec: RenderSpec) -> list[str]:
        o = self.options
        tips = self._unused_memory_accelerations("fp8")
        if not o.kv_fp8 and o.reference_kv != "fp8-file" and not o.kv_offload:
            tips.append("kv_fp8=True (halves the reference K/V)")
        if not o.kv_offload:
            tips.append("kv_offload=True (reference K/V in host memory, one layer on the GPU at a time)")
        if o.reference_kv == "gpu-lru":
            tips.append(f"a smaller kv_lru_gib (now {o.kv_lru_gib}) or reference_kv='extract'")
        return tips + self._unused_memory_accelerations("vae_tiling", "ffn_chunks")

    def _model_frames(self, guidance: Any, persona: Any, keypoints: np.ndarray, spec: RenderSpec) -> Iterator[np.ndarray]:
        """The clip at 24 fps (``round(T * 24 / loop fps)`` frames, the pose resampled to match);
        :meth:`_retimed` re-times it to the ``T`` frames asked for."""
        from newsmotion_engine.guidance.driver import resample_loop

        self.last_prompt = self.prompt_text(persona, spec)
        return self._frames(guidance, persona, resample_loop(keypoints, self._model_frame_count(guidance, keypoints)), spec)

    def _frames(self, guidance: Any, persona: Any, keypoints: np.ndarray, spec: RenderSpec) -> Iterator[np.ndarray]:
        """Every segment denoised, then decoded one latent frame (four frames) at a time
        (:func:`.segment.decode_chunks`, the same frames as the whole decode), every chunk's
        kernels enqueued before the segment's first frame is handed out; the clip's last segment
        decodes only the frames the clip still needs.

        Why not hand frames out while the decoder runs: a segment the next one continues from
        (``continuation="frames"``) must finish first anyway (the next denoise waits on its tail).
        For the last one, the H100 clip record (``wan_animate_2_clip_h100.json``, timeline)
        showed that streaming costs more than it overlaps: its 5 latent frames took 2.8 s, 560 ms
        each, against 258 ms each for the first segment's 21, decoded whole. Most likely the
        decoder's ~500 small launches per latent frame, issued from the read-ahead thread, waited
        on the consumer's re-timing and matte threads for the interpreter (not profiled)."""
        import torch

        from newsmotion_engine.render.backends.wan import decode as wan_decode
        from newsmotion_engine.render.backends.wan_animate_2.segment import decode_chunks, denoise_from_caches

        o, comps = self.options, self.components
        T = int(np.asarray(keypoints).shape[0])
        plan = self.plan(T)
        geom = self.geometry(spec, plan)
        t0 = time.perf_counter()
        g = self.load_guidance(guidance, spec, T)
        p = self.load_persona(persona, spec)
        kv_source = self.reference_kv_source(guidance, g, spec, plan)
        prep_s = time.perf_counter() - t0
        gen = torch.Generator("cpu").manual_seed(spec.seed)
        # segment_condition_s (inside segment_denoise_s): the conditioning, a continuation's VAE encode included
        stats: dict[str, Any] = {"segments": plan.segments, "kv_s": 0.0, "denoise_s": 0.0, "decode_s": 0.0,
                                 "cond_passes": 0, "uncond_passes": 0, "teacache_computed": 0, "teacache_skipped": 0, "segment_denoise_s": [],
                                 "segment_condition_s": []}  # fmt: skip
        # Wall-clock marks (seconds since this render started) of each segment's phases: where a
        # clip's time goes besides the denoise and the decoder's GPU time (waits, hand-offs).
        timeline: list[dict[str, Any]] = []

        def mark(event: str, segment: int) -> None:
            timeline.append({"event": event, "segment": segment, "t": round(time.perf_counter() - t0, 3)})

        emitted, previous_latents, previous_tail = 0, None, None
        for k in range(plan.segments):
            mark("denoise_start", k)
            noise = torch.randn(geom.noise_shape, generator=gen, dtype=torch.float32)
            seg = denoise_from_caches(comps, g, p, geom=geom, segment=k, noise=noise, steps=o.num_steps,
                                      guidance_scale=o.cfg_scale, kv_source=kv_source, previous_latents=previous_latents,
                                      previous_tail=previous_tail, continuation=o.continuation, prev_frames=o.prev_frames,
                                      generator=gen)  # fmt: skip
            for key in ("kv_s", "denoise_s", "cond_passes", "uncond_passes", "teacache_computed", "teacache_skipped"):
                stats[key] += seg.stats[key]
            stats["segment_denoise_s"].append(round(seg.stats["denoise_s"], 3))
            stats["segment_condition_s"].append(round(seg.stats["condition_s"], 3))
            mark("denoise_end", k)
            # The frames of this segment to hand out: after the first, its first prev_frames are the
            # previous segment's last (not emitted again); frames past the clip are dropped.
            skip = 0 if k == 0 else o.prev_frames
            successor = o.continuation == "frames" and k + 1 < plan.segments
            wanted = None if successor else skip + (T - emitted)
            latent_frames = int(seg.latents.shape[1]) - 1
            previous_latents, previous_tail, index = seg.latents, None, 0
            tail = wan_decode.DecodedTail(o.prev_frames)  # the decoded frames the next segment continues from
            # decode_s: the decoder's own time (CUDA: GPU time between events around each chunk's
            # kernels, so the consumer's CPU work between chunks is not counted).
            for chunk in decode_chunks(comps.vae, seg.latents, wanted, lookahead=latent_frames):
                if index == 0:
                    mark("first_chunk_decoded", k)
                stats["decode_s"] += chunk.decode_s
                if successor:
                    tail.add(chunk.video)
                    if chunk.last:
                        previous_tail = tail.video()
                frames = chunk.frames
                del chunk
                for frame in frames:
                    index += 1
                    if index <= skip or emitted >= T:
                        continue
                    emitted += 1
                    yield np.ascontiguousarray(frame)
            mark("frames_handed_out", k)
        stats["prep_s"] = prep_s
        stats["timeline"] = timeline
        for key in ("kv_s", "denoise_s", "decode_s", "prep_s"):
            stats[key] = round(stats[key], 3)
        stats["kv"] = list(self._kv_log)
        if self.kv_lru is not None:
            stats["kv_lru"] = self.kv_lru.stats()
        self.last_render = stats


def _pixels(frames: np.ndarray):
    """uint8 ``[T, H, W, 3]`` -> float32 ``[1, 3, T, H, W]`` in [-1, 1], as the stock video processor
    normalizes (``x / 255 * 2 - 1``)."""
    import torch

    t = torch.from_numpy(np.ascontiguousarray(frames)).float().div_(255.0).mul_(2.0).sub_(1.0)
    return t.permute(3, 0, 1, 2).unsqueeze(0)
