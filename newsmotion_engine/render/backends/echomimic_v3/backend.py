"""The ``echomimic-v3`` backend: EchoMimicV3 flash-pro (audio-driven talking head on
Wan2.1-Fun-1.3B-InP) on the :class:`~..wan.diffusers_backend.DiffusersBackend` base.

A render performs a speech with the persona's portrait: either the ``speech`` option (a speech id
of the speech cache; the clip has the speech's length, :meth:`EchoMimicV3Backend.clip_frames`) or
the speech track handed to the render (``frames(..., speech=track)``, ``hears_speech``: a story's
assembled speech, exactly as long as the clip; its features are made by the same recipe and cached
by the audio's digest). Both at once are refused (``render.base.SpeechConflictError``): which
one to perform would be a guess. Without either, a silent clip of the loop's length (zero audio
features). The loop's pose is not an input of this model. What drove the mouth is in
``describe()["last_render"]["mouth"]``.

Per clip: the model renders ``n = round(frames * 25 / fps)`` frames at its own size
(:meth:`~.config.EchoMimicV3Options.model_size`) in segments (:func:`..wan.segments.plan_segments`,
``segment_frames`` long, overlapping by ``overlap_frames``). Segment 0 is conditioned on the
persona's cached first condition (the reference frame known); each later one on the previous
segment's last ``overlap_frames`` decoded frames (rounded to 8 bits as the official loop hands them
over as images), VAE-encoded (:func:`..wan.continuation.frames_continuation`), and the overlapping
frames are cross-faded linearly (official ``infer_preview.py``). Every segment reads the same CLIP
tokens and prompt embedding (Tier 2) and its frames' audio windows. The frames are then resized to
the render size, re-timed from 25 fps to ``spec.fps`` (nearest frame) and composited on the exact
chroma colour by the base class.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from newsmotion_engine.render.base import BackendNeeds, InvalidSpecError, RenderSpec, check_speech, refuse_second_speech
from newsmotion_engine.render.backends.echomimic_v3 import caches as C
from newsmotion_engine.render.backends.echomimic_v3.audio import (
    SpeechAudio,
    audio_encoder,
    load_speech_audio,
    segment_windows,
    silent_audio,
    track_speech_audio,
)
from newsmotion_engine.render.backends.echomimic_v3.config import NAME, EchoMimicV3Options
from newsmotion_engine.render.backends.wan import segments
from newsmotion_engine.render.backends.wan.diffusers_backend import DiffusersBackend, DiffusersOOMError

__all__ = ["EchoMimicV3Backend", "EchoMimicV3OOMError", "retime_indices"]


class EchoMimicV3OOMError(DiffusersOOMError):
    """The GPU ran out of memory during an echomimic-v3 render."""


def retime_indices(out_frames: int, model_frames: int, model_fps: float, fps: float) -> np.ndarray:
    """For each output frame at ``fps``, the model frame (at ``model_fps``) nearest in time."""
    t = np.arange(out_frames) * (model_fps / fps)
    return np.minimum(np.floor(t + 0.5).astype(np.int64), model_frames - 1)


class EchoMimicV3Backend(DiffusersBackend):
    """See the module docstring. Construct through the registry: ``get_backend("echomimic-v3", speech="...")``."""
    warns_few_steps = False  # flash-pro is released for 8 steps

    name: ClassVar[str] = NAME
    # It performs no viseme track (the ``visemes`` keyword is ignored): its mouth follows audio
    # features, of the ``speech`` option or of the speech track a render is handed.
    moves_lips: ClassVar[bool] = False
    hears_speech: ClassVar[bool] = True
    needs: ClassVar[BackendNeeds] = BackendNeeds(guidance=frozenset({"keypoints"}),
                                                 persona=frozenset({"portrait", "person_mask", "first_condition", "image_tokens", "prompt_embeds"}))  # fmt: skip
    options_class: ClassVar[type] = EchoMimicV3Options
    caches: ClassVar[Any] = C
    oom_error: ClassVar[type[DiffusersOOMError]] = EchoMimicV3OOMError

    def __init__(self, options: EchoMimicV3Options) -> None:
        super().__init__(options)
        self._speech: SpeechAudio | None = None
        self._given_speech: SpeechAudio | None = None
        # The speech track of the render in progress (frames(speech=)) and its features, or None.
        self._heard: tuple[Any, SpeechAudio] | None = None
        self._track_encoder: Any = None  # wav2vec2 for speech tracks, built on the first one (seconds on a CPU)

    def _load_components(self) -> Any:
        from newsmotion_engine.render.backends.echomimic_v3.components import load_render_components

        return load_render_components(self.options)

    def _released(self) -> None:
        self._speech = self._given_speech
        self._heard = None
        self._track_encoder = None

    def _settings(self) -> dict[str, Any]:
        o = self.options
        return {"steps": o.num_steps, "audio_guidance_scale": o.guidance, "batch_cfg": o.batch_cfg, "prompt": o.prompt,
                "segment_frames": o.segment_length, "overlap_frames": o.overlap, "model_fps": o.model_fps,
                "speech": o.speech, "audio_features": o.audio_features, "speech_features": self._speech_digest(),
                # A speech track's features are made at render time: the encoder is part of what the frames depend on.
                "audio_encoder": self._audio_model_path() or "chinese-wav2vec2-base, random weights",
                "max_side": o.max_side,
                "accelerations": o.accel_summary(),
                "lips": (f"driven by speech {o.speech!r}'s audio features" if o.speech else
                         "driven by the speech track a render is handed (a story's speech); silent without one")}  # fmt: skip

    def _check_spec(self, spec: RenderSpec) -> None:
        super()._check_spec(spec)
        if spec.keyframes > 1:
            raise InvalidSpecError(f"{NAME} renders every frame (the audio drives each one); use keyframes=1, not {spec.keyframes}")

    def plan(self, frames: int) -> segments.SegmentPlan:
        return segments.plan_segments(frames, self.options.segment_length, self.options.overlap, fit=True)

    # ------------------------------------------------------------------ speech
    def _audio_shape(self) -> dict[str, int]:
        cfg = self.components.transformer.config
        return {"window": cfg.audio_window, "layers": cfg.audio_layers, "channels": cfg.audio_channels}

    def speech_audio(self, *, build: bool = False) -> SpeechAudio | None:
        """The configured speech's features (read once per loaded backend; ``build``: have the speech
        tier build them when missing), or None without a speech."""
        o = self.options
        if self._given_speech is not None:
            return self._given_speech
        if o.speech is None:
            return None
        if self._speech is None:
            if not o.speech_root:
                from newsmotion_engine.errors import BadInputError

                raise BadInputError(o.speech, "echomimic-v3 option speech needs speech_root, the speech cache root (the CLI sets it)")
            self._speech = load_speech_audio(o.speech_root, o.speech, fps=o.model_fps, audio_model_path=self._audio_model_path(),
                                             recipe=o.audio_features, build=build, **self._audio_shape())  # fmt: skip
        return self._speech

    def use_speech_audio(self, audio: SpeechAudio | None) -> None:
        """Perform ``audio`` (features already shaped for this model, e.g. a benchmark's) instead of
        reading the ``speech`` option's; ``None`` goes back to the option. Renders after this call
        last ``audio.duration_s``."""
        self._given_speech = audio
        self._speech = audio

    def _speech_digest(self) -> str | None:
        """The performed features' digest (part of a render's input digest), once the model is
        loaded; features not built yet are reported as such (``describe()`` never builds, and a
        render raises on them)."""
        from newsmotion_engine.errors import CacheError, CacheNotReadyError

        try:
            speech = self.speech_audio() if self.components is not None else None
        except (CacheNotReadyError, CacheError) as exc:  # the features, or the speech cache itself
            return f"not ready: {exc}"
        return speech.digest if speech is not None else None

    def frames(self, guidance: Any, persona: Any, keypoints: np.ndarray, spec: RenderSpec, *, visemes: Any = None,
               speech: Any = None) -> Iterator[np.ndarray]:  # fmt: skip
        """As the base class' ``frames``; ``speech`` (a
        :class:`~newsmotion_engine.speech.audio.SpeechTrack` of exactly ``len(keypoints) / spec.fps``
        seconds) is performed: its features are computed (or read from their cache) here, before
        any frame, and the clip has ``len(keypoints)`` frames.

        Raises:
            SpeechConflictError: a speech track while the ``speech`` option (or
                :meth:`use_speech_audio`) already names one (:meth:`own_speech`).
            SpeechMismatchError: a track of another duration than the clip.
        """
        if speech is not None:  # refused before the model loads
            refuse_second_speech(self, f"the speech track {speech.label!r}")
            check_speech(speech, len(keypoints), spec.fps)
        self.load()
        self._heard = None if speech is None else (speech, self.speech_features(speech))
        return super().frames(guidance, persona, keypoints, spec, visemes=visemes)

    def own_speech(self) -> str | None:
        """The speech this backend performs whatever a render hands it (the ``speech`` option, or
        features given by :meth:`use_speech_audio`), or None (see ``render.base.refuse_second_speech``)."""
        if self.options.speech is not None:
            return f"speech {self.options.speech!r} (its speech option)"
        return "features given by use_speech_audio" if self._given_speech is not None else None

    def speech_features(self, track: Any) -> SpeechAudio:
        """A speech track's features for this model (the configured recipe; cached by the audio's digest)."""
        o = self.options
        shape = self._audio_shape()
        if self._track_encoder is None:
            self._track_encoder = audio_encoder(self._audio_model_path(), shape["layers"])
        return track_speech_audio(track, fps=o.model_fps, encoder=self._track_encoder, recipe=o.audio_features, **shape)

    def _audio_model_path(self) -> str | None:
        """The wav2vec2 folder: the option, else the model folder's ``wav2vec2/``, else None (random weights)."""
        o = self.options
        if o.audio_model_path:
            return o.audio_model_path
        return str(Path(o.model_path) / "wav2vec2") if o.model_path and (Path(o.model_path) / "wav2vec2").is_dir() else None

    def _mouth(self, speech: SpeechAudio) -> dict[str, Any]:
        """What drives this render's mouth, for its record."""
        o = self.options
        if self._heard is not None:
            track = self._heard[0]
            return {"driven_by": "speech track", "label": track.label, "audio_digest": track.digest[:16],
                    "duration_s": round(track.duration_s, 3), "features": speech.digest, "recipe": o.audio_features}  # fmt: skip
        if speech.digest is None:
            return {"driven_by": "silence (zero audio features)"}
        if self._given_speech is not None:
            return {"driven_by": "given features (use_speech_audio)", "features": speech.digest}
        return {"driven_by": "speech option", "speech": o.speech, "features": speech.digest, "recipe": o.audio_features}

    def clip_frames(self, guidance: Any, spec: RenderSpec) -> int:
        """How many frames the clip has at ``spec.fps``: the speech's length, or the loop's without a speech."""
        self.load()
        speech = self.speech_audio()
        if speech is None:
            return int(np.asarray(guidance.keypoints).shape[0])
        return max(1, round(speech.duration_s * spec.fps))

    def prepare_guidance(self, guidance: Any, spec: RenderSpec) -> bool:
        """No loop artifacts (the model does not follow a pose); has the speech tier build the
        configured speech's features when missing, so a render (which only reads them) finds them.
        ``False``: nothing of this backend's was built."""
        self.load()
        self.speech_audio(build=True)
        return False

    # ------------------------------------------------------------------ persona tier
    def persona_params(self, persona: Any, spec: RenderSpec) -> tuple[dict, dict]:
        source, params = super().persona_params(persona, spec)
        params.update(model_size=list(self.options.model_size(spec.width, spec.height)), segment_frames=self.options.segment_length,
                      prompt=self.options.prompt)  # fmt: skip
        return source, params

    def _build_persona(self, path: Path, persona: Any, spec: RenderSpec, source: dict, params: dict) -> None:
        import torch

        from newsmotion_engine.render.backends.echomimic_v3.components import load_image_encoder, load_text_encoder
        from newsmotion_engine.render.backends.wan.artifacts import reference_frame
        from newsmotion_engine.render.backends.wan.continuation import frames_continuation
        from newsmotion_engine.render.backends.wan.encoders import encode_image_tokens, encode_prompts, to_video_tensor

        comps = self.components
        mw, mh = params["model_size"]
        ref = reference_frame(persona, mw, mh, spec.background)
        first = frames_continuation(comps.vae, to_video_tensor(ref[None]).to(comps.device), self.options.segment_length)[0]
        enc = load_image_encoder(self.options, comps.device)
        tokens = encode_image_tokens(enc, ref, comps.device)
        del enc
        tok, text = load_text_encoder(self.options, comps.device)
        prompt = encode_prompts(tok, text, [self.options.prompt], comps.device)
        del text
        if comps.device.type == "cuda":
            torch.cuda.empty_cache()
        C.write_persona_artifacts(path, C.PersonaArtifacts(first.float().cpu(), tokens, prompt), source=source, params=params,
                                  extra=self._cache_extra())  # fmt: skip

    # ------------------------------------------------------------------ render
    def _model_frames(self, guidance: Any, persona: Any, keypoints: np.ndarray, spec: RenderSpec) -> Iterator[np.ndarray]:
        import cv2

        o = self.options
        out_frames = len(keypoints) if self._heard is not None else self.clip_frames(guidance, spec)
        n = max(1, round(out_frames * o.model_fps / spec.fps))
        index = retime_indices(out_frames, n, o.model_fps, spec.fps)
        pa = self.load_persona(persona, spec)  # raises BackendCacheError before any denoising
        speech = (self._heard[1] if self._heard is not None else self.speech_audio()) or silent_audio(n, **self._audio_shape())
        model = self._segment_frames(pa, speech, n, spec)
        current, frame = -1, None
        for k in index:
            while current < k:
                frame, current = next(model), current + 1
            yield cv2.resize(frame, (spec.width, spec.height), interpolation=cv2.INTER_CUBIC)

    def _segment_frames(self, pa: C.PersonaArtifacts, speech: SpeechAudio, n: int, spec: RenderSpec) -> Iterator[np.ndarray]:
        """The ``n`` model frames (uint8 RGB at the model size), segment by segment, overlaps cross-faded."""
        import torch

        from newsmotion_engine.accel.teacache import teacache_stats
        from newsmotion_engine.render.backends.echomimic_v3.denoise import decode, denoise_segment
        from newsmotion_engine.render.backends.wan.artifacts import as_tensor
        from newsmotion_engine.render.backends.wan.continuation import frames_continuation

        o, comps = self.options, self.components
        plan = self.plan(n)
        dev, dtype = comps.device, comps.dtype
        t_lat = plan.latent_frames
        first = as_tensor(pa.first_condition)[:, :t_lat].unsqueeze(0).to(dev)
        tokens, prompt = as_tensor(pa.image_tokens).to(dev), as_tensor(pa.prompt_embeds).to(dev)
        ov = plan.prev_frames
        mix = torch.linspace(0, 1, ov).view(ov, 1, 1, 1)
        held: torch.Tensor | None = None  # the previous segment's last `ov` frames, [ov, H, W, 3] in [0, 1]
        emitted, stats = 0, {"segments": plan.segments, "segment_frames": plan.segment_frames, "overlap_frames": ov,
                             "model_frames": n, "model_size": list(o.model_size(spec.width, spec.height)),
                             "audio": speech.digest or "silence", "mouth": self._mouth(speech), "denoise_s": 0.0, "decode_s": 0.0,
                             "teacache_skipped": 0}  # fmt: skip
        self.last_render = stats
        for k in range(plan.segments):
            t0 = time.perf_counter()
            cond = first if k == 0 else frames_continuation(comps.vae, tail, plan.segment_frames).to(dev)
            audio = torch.from_numpy(segment_windows(speech.features, plan.start(k), plan.segment_frames)).unsqueeze(0).to(dev)
            latents = denoise_segment(comps.transformer, comps.new_scheduler(), cond, tokens, prompt, audio, sigmas=o.sampling_sigmas(),
                                      guidance=o.guidance, batch_cfg=o.batch_cfg, seed=spec.seed + k, dtype=dtype)  # fmt: skip
            t1 = time.perf_counter()
            video = decode(comps.vae, latents)  # [1, 3, F, H, W] in [-1, 1]
            stats["denoise_s"] += round(t1 - t0, 3)
            stats["teacache_skipped"] += teacache_stats(comps.transformer)["skipped"]
            stats["decode_s"] += round(time.perf_counter() - t1, 3)
            # The next segment starts from these frames as the official loop hands them over: 8-bit images.
            frames = ((video[0].permute(1, 2, 3, 0).float() + 1) / 2).clamp(0, 1).mul(255).round().div(255).cpu()
            tail = frames[-ov:].permute(3, 0, 1, 2).unsqueeze(0).mul(2).sub(1).to(dev)
            if held is not None:
                frames[:ov] = held * (1 - mix) + frames[:ov] * mix
            last = k == plan.segments - 1
            body = frames if last else frames[:-ov]
            held = None if last else frames[-ov:]
            for f in body:
                if emitted == n:
                    return
                yield (f.numpy() * 255).round().astype(np.uint8)
                emitted += 1

    def _memory_tips(self, spec: RenderSpec) -> list[str]:
        return [*self._unused_memory_accelerations("fp8", "vae_tiling", "ffn_chunks"),
                *([] if not self.options.batch_cfg else ["batch_cfg=false (one guidance pass at a time)"])]  # fmt: skip
