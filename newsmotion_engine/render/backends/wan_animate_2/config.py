"""Configuration of the ``wan-animate-2`` backend as data: presets, the two sampling schedules,
the reference K/V source, and :class:`WanAnimate2Options`.

Schedules (diffusers 0.42.1's modular pipelines are the reference):

- ``distilled``: ``WanAnimate2DistilledModularPipeline``'s defaults, 10 steps, no CFG.
- ``base``: ``WanAnimate2ModularPipeline``'s defaults, 40 steps, CFG 3.0 (the unconditional branch
  uses the negative prompt and skips block 9, as the stock transformer does).

Defaults: with a ``model_path`` the schedule is the folder's pipeline class (``_class_name`` of its
``modular_model_index.json``, else ``model_index.json``), the guidance scale its guider's
(``guider/guider_config.json`` when the folder has one, else the pipeline's), the scheduler the
class and config of ``scheduler/scheduler_config.json``, 81-frame segments; the prompt is the
persona's appearance-and-background caption (:mod:`.caption`), the negative prompt empty and the
reference prompt ``人物动作的参考视频`` (the modular pipeline's defaults). Without a folder: the
``distilled`` schedule and the preset's segment length and scheduler (flow-matching Euler, shift 5).

Reference K/V (``reference_kv``): every segment's denoising passes read the per-layer K/V of the
driving-video segment, which depend only on the loop (not the persona). Three sources:

- ``extract`` (default): run the transformer's extract pass at render time from the Tier-1 inputs
  (driving latents and condition, CLIP context, reference-prompt embeddings; no encoder runs).
- ``fp8-file``: ``prepare_guidance`` also runs the extract passes and writes every segment's K/V
  as FP8 (e4m3, one scale per token and head) beside the Tier-1 inputs; renders read it.
- ``gpu-lru``: extract once, keep the K/V on the device in an LRU keyed by (loop cache, size,
  segment, model) inside the backend, bounded by ``kv_lru_gib``; a warm renderer resource reuses
  them across personas.

``kv_fp8=True`` stores extracted K/V (extract and gpu-lru) as FP8 on the device too (half the
bytes; dequantized one layer at a time as the attention reads it). ``kv_offload=True`` keeps the
FP8 K/V in pinned host memory and copies one layer to the device as the attention reads it
(the device holds one layer's K/V; with ``gpu-lru`` the LRU then holds host tensors).

Accelerations: the typed configs of :mod:`newsmotion_engine.accel` that apply to this model —
``Fp8Linears`` (the blocks' linears), ``FfnChunks``, ``VaeTiling``, ``Compile`` (regional, which
the cached pass's flex attention needs on a GPU; ``fullgraph=False``, since the stock blocks call
``grid_sizes.tolist()`` in ``rope_apply``) and, on the base schedule only, ``CFGSchedule`` and
``TeaCache``. ``Attention(kernel="fp8-triton")`` replaces the self-attention (:mod:`.attention`:
the cached pass's block-mask attention as one launch of our 8-bit kernel with an in-context
reference; Hopper only). The others are refused with the reason: the other ``Attention`` kernels
and ``SparseAttention`` (the cached pass is flex attention over a block mask, not the processors
those replace), ``ContextParallel`` (no plan for this model).
The flat keys are the wan-animate ones (``fp8``, ``compile``, ``cfg_*``, ``vae_tiling``,
``ffn_chunks``), parsed by the same parser (:mod:`newsmotion_engine.render.backends.wan.diffusers_config`, which
also holds the parsing and checks the two options classes share).

Presets build the architecture with **random weights** when no model folder is given (labelled
so everywhere; frames are noise):

- ``tiny``: two layers of width 24, 9-frame segments; CPU tests run a clip in seconds.
- ``1.3b``: Wan 1.3B dimensions (30 layers, 12 heads x 128, FFN 8960) — architecture-equivalent
  to a 1.3B Wan-Animate-2 (same blocks and attention pattern at that size), not a released model.
- ``14b``: Wan 14B dimensions (40 layers, 40 heads x 128, FFN 13824).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

from newsmotion_engine.accel.registry import AccelConfig
from newsmotion_engine.render.base import BackendOptionError
from newsmotion_engine.errors import BadInputError
from newsmotion_engine.render.backends.wan.continuation import CONTINUATIONS
from newsmotion_engine.render.backends.wan.diffusers_config import (
    COMPILE_VAE_REFUSED,
    DTYPES,
    ONE_KEY_CROSS_REFUSED,
    RANDOM_WEIGHTS_LABEL,
    DiffusersOptions,
    folder_pipeline_class,
)

__all__ = [
    "NAME",
    "PRESETS",
    "RANDOM_WEIGHTS_LABEL",
    "REFERENCE_KV",
    "SCHEDULES",
    "Preset",
    "Schedule",
    "WanAnimate2ConfigError",
    "WanAnimate2Options",
]

NAME = "wan-animate-2"
MODEL_DIR_ENV = "NEWSMOTION_MODEL_DIR_ANIMATE2"
RELEASED_SEGMENT_FRAMES = 81  # the modular pipelines' segment_frame_length
RELEASED_FPS = 24  # the modular pipelines' fps: the driving video is read at 24 fps
PRESET_SCHEDULE = "distilled"  # without a model folder
GUIDER_CONFIG = "guider/guider_config.json"
CAPTION_PROMPT = "persona caption (render/backends/wan_animate_2/caption.py)"
REFERENCE_PROMPT = "人物动作的参考视频"  # the stock pipeline's default `prompt_ref` ("reference video of a person's motion")
ReferenceKV = Literal["extract", "fp8-file", "gpu-lru"]
REFERENCE_KV: tuple[str, ...] = ("extract", "fp8-file", "gpu-lru")


class WanAnimate2ConfigError(BackendOptionError):
    """A wan-animate-2 option that is unknown, out of range or does not apply to this model."""


@dataclass(frozen=True)
class Schedule:
    """One sampling schedule: the stock pipeline's defaults."""

    name: str
    steps: int
    guidance_scale: float
    stock_pipeline: str


SCHEDULES: dict[str, Schedule] = {
    "distilled": Schedule("distilled", 10, 1.0, "WanAnimate2DistilledModularPipeline"),
    "base": Schedule("base", 40, 3.0, "WanAnimate2ModularPipeline"),
}
_SCHEDULE_OF_PIPELINE = {s.stock_pipeline: s.name for s in SCHEDULES.values()}


@dataclass(frozen=True)
class Preset:
    """One architecture: constructor kwargs per component."""

    name: str
    transformer: dict[str, Any]  # WanAnimate2Transformer3DModel kwargs
    vae: dict[str, Any]  # AutoencoderKLWan kwargs
    image_encoder: dict[str, Any]  # transformers.CLIPVisionConfig kwargs (hidden 1280: img_emb is MLPProj(1280, dim))
    text_encoder: dict[str, Any]  # transformers.UMT5Config kwargs
    segment_frames: int = 81
    flow_shift: float = 5.0


_WAN21_VAE = dict(base_dim=96, z_dim=16, dim_mult=[1, 2, 4, 4], num_res_blocks=2, temperal_downsample=[False, True, True])
_CLIP_H14 = dict(hidden_size=1280, intermediate_size=5120, num_hidden_layers=32, num_attention_heads=16,
                 image_size=224, patch_size=14, projection_dim=1024, hidden_act="gelu")  # fmt: skip
_UMT5_XXL = dict(vocab_size=256384, d_model=4096, d_kv=64, d_ff=10240, num_layers=24, num_heads=64,
                 feed_forward_proj="gated-gelu", relative_attention_num_buckets=32)  # fmt: skip

PRESETS: dict[str, Preset] = {
    "tiny": Preset(
        name="tiny",
        transformer=dict(dim=24, ffn_dim=32, freq_dim=32, text_dim=32, num_heads=2, num_layers=2),
        vae=dict(base_dim=4, z_dim=16, dim_mult=[1, 1, 1, 1], num_res_blocks=1, temperal_downsample=[False, True, True]),
        image_encoder=dict(hidden_size=1280, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
                           image_size=224, patch_size=14, projection_dim=16),  # fmt: skip
        text_encoder=dict(vocab_size=512, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4, feed_forward_proj="gated-gelu"),
        segment_frames=9,
    ),
    "1.3b": Preset(
        name="1.3b",
        transformer=dict(dim=1536, ffn_dim=8960, freq_dim=256, text_dim=4096, num_heads=12, num_layers=30),
        vae=_WAN21_VAE, image_encoder=_CLIP_H14, text_encoder=_UMT5_XXL,
    ),  # fmt: skip
    "14b": Preset(
        name="14b",
        transformer=dict(dim=5120, ffn_dim=13824, freq_dim=256, text_dim=4096, num_heads=40, num_layers=40),
        vae=_WAN21_VAE, image_encoder=_CLIP_H14, text_encoder=_UMT5_XXL,
    ),  # fmt: skip
}

# Technique name -> why it does not apply to this model (checked without importing torch).
_REFUSED = {
    "sparse_attention": "the block-sparse layout is written for Wan-Animate's dense self-attention, not the flex block mask",
    "context_parallel": "there is no context-parallel plan for WanAnimate2Transformer3DModel",
    "compile_vae": COMPILE_VAE_REFUSED,
    "one_key_cross": ONE_KEY_CROSS_REFUSED,
}
_BASE_ONLY = {
    "cfg": "there is no unconditional pass on the distilled schedule (no CFG); use schedule='base'",
    "teacache": "it skips calls of the base schedule's 40 steps; the distilled schedule is already 10; use schedule='base'",
}


@dataclass(frozen=True)
class WanAnimate2Options(DiffusersOptions):
    """Every ``wan-animate-2`` option (:meth:`from_mapping` parses the flat keys).

    Model:
        model_path: a diffusers-format Wan-Animate-2 folder (default ``$NEWSMOTION_MODEL_DIR_ANIMATE2``);
            none -> ``preset`` with random weights (the preset is ignored with a folder; unset
            options then come from the folder, see the module docstring).
            device: ``"auto"``/``"cpu"``/``"cuda[:n]"``.
        dtype: transformer compute dtype (default ``"bfloat16"``).
    Sampling:
        schedule: ``"distilled"`` (10 steps, no CFG) or ``"base"`` (40 steps, CFG 3.0); unset:
            the model folder's pipeline class, ``"distilled"`` without a folder.
        steps / guidance_scale: override the schedule's (guidance > 1 only on ``base``); unset
            guidance: the folder's guider config when it has one, else the schedule's.
        segment_frames: frames per segment (4k+1; default 81 with a model folder, else the
            preset's: 9 for ``tiny``, 81 for the real sizes);
        fit_segments: OFF by default (a shorter generation length whose picture quality needs real
            weights to judge; ``newsmotion calibrate fit-segments``): each clip's segments shortened
            to the least ``4k+1`` that covers it in as many segments as ``segment_frames`` would
            (120 frames: 2 x 61 instead of 2 x 81, 41 frames that the stock pipeline denoises and
            throws away are never rendered).
        prev_frames: frames carried into the next segment (the stock default 1).
        continuation: ``"frames"`` (default: as the model was trained and the stock pipeline
            does, the next segment's conditioning is the VAE encoding of the previous segment's
            last decoded frames) or ``"latent"`` (EXPERIMENTAL, not what the model was trained on:
            the previous segment's last latent frame, no VAE encode at render time; its picture
            quality needs real weights to judge).
        prompt: unset (default): each persona's appearance-and-background caption
            (:func:`.caption.persona_caption`, cached with the persona, Tier 2); negative_prompt
            (default empty) / prompt_ref (default ``人物动作的参考视频``): the modular pipeline's
            defaults (cached in Tier 1).
    Reference K/V:
        reference_kv: ``"extract"`` (default), ``"fp8-file"`` or ``"gpu-lru"``; kv_fp8: hold
        extracted K/V as FP8; kv_offload: FP8 K/V in host memory, one layer copied per read;
        kv_lru_gib: the LRU's byte budget.
    Accelerations:
        accelerations: typed configs (see the module docstring for which apply).
    Tests:
        cache_root: where sub-caches go (default: inside the parent caches).

    Parsing, the checks shared with wan-animate and the acceleration queries are
    :class:`~..diffusers_config.DiffusersOptions`'.
    """

    backend: ClassVar[str] = NAME
    config_error: ClassVar[type[BackendOptionError]] = WanAnimate2ConfigError
    refused_accelerations: ClassVar[Mapping[str, str]] = _REFUSED
    model_dir_env: ClassVar[str] = MODEL_DIR_ENV
    presets: ClassVar[Mapping[str, Preset]] = PRESETS
    released_segment_frames: ClassVar[int] = RELEASED_SEGMENT_FRAMES
    default_scheduler: ClassVar[str] = "FlowMatchEulerDiscreteScheduler"
    # model_path, preset, device, dtype: DiffusersOptions' fields (first, in this order)
    schedule: str | None = None  # resolved in __post_init__ (the folder's pipeline class, else PRESET_SCHEDULE)
    steps: int | None = None
    guidance_scale: float | None = None
    segment_frames: int | None = None
    fit_segments: bool = False
    prev_frames: int = 1
    continuation: str = "frames"
    prompt: str | None = None
    negative_prompt: str = ""
    prompt_ref: str = REFERENCE_PROMPT
    reference_kv: ReferenceKV = "extract"
    kv_fp8: bool = False
    kv_offload: bool = False
    kv_lru_gib: float = 80.0
    accelerations: tuple[AccelConfig, ...] = ()
    cache_root: str | None = None

    def __post_init__(self) -> None:
        self._check_choice("preset", PRESETS)
        self._check_choice("dtype", DTYPES)
        self._resolve_schedule()
        self._check_choice("schedule", SCHEDULES)
        if self.steps is not None:
            self._check_steps()
        if self.guidance_scale is not None:
            self._check_guidance_scale()
            if float(self.guidance_scale) > 1.0 and self.schedule == "distilled":
                raise self._bad("guidance_scale", "the distilled schedule samples without CFG; use schedule='base' for guidance")
            object.__setattr__(self, "guidance_scale", float(self.guidance_scale))
        self._check_segment_frames(example=81)
        if self.prev_frames != 1 or isinstance(self.prev_frames, bool):
            raise self._bad("prev_frames", "use 1 (the stock pipeline's prev_segment_conditioning_frames)")
        self._check_choice("continuation", CONTINUATIONS)
        self._check_choice("reference_kv", REFERENCE_KV)
        for name in ("kv_fp8", "kv_offload", "fit_segments"):
            if not isinstance(getattr(self, name), bool):
                raise self._bad(name, "use true or false")
        if not isinstance(self.kv_lru_gib, (int, float)) or isinstance(self.kv_lru_gib, bool) or self.kv_lru_gib <= 0:
            raise self._bad("kv_lru_gib", "use a positive number of GiB")
        self._check_strings(optional=("prompt", "model_path", "cache_root"), required=("negative_prompt", "prompt_ref"))
        self._check_lora()
        configs = self._ordered_accelerations()
        for c in configs:
            if c.technique == "compile" and getattr(c, "fullgraph", False):
                raise WanAnimate2ConfigError(
                    f"{NAME}: Compile(fullgraph=True) cannot compile this transformer: its rope_apply reads "
                    "grid_sizes.tolist() inside every block (a graph break); use Compile(fullgraph=False) or compile='blocks'"
                )
            if c.technique == "attention" and c.kernel not in ("fp8-triton", "fp8-cudnn"):
                raise WanAnimate2ConfigError(
                    f"{NAME}: attention {c.kernel!r} does not apply: the cached pass is flex attention over a block mask; "
                    "only attention='fp8-triton' (our 8-bit kernel: all generation keys, then each frame's reference "
                    "keys, in one softmax) or 'fp8-cudnn' (cuDNN's FP8 kernel, the two parts merged) replace it"
                )
            if c.technique in _BASE_ONLY and self.schedule != "base":
                raise WanAnimate2ConfigError(f"{NAME}: acceleration {type(c).__name__} needs the base schedule: {_BASE_ONLY[c.technique]}")
        object.__setattr__(self, "accelerations", configs)

    @classmethod
    def parse_flat_accelerations(cls, flat: Mapping[str, Any]) -> tuple[AccelConfig, ...]:
        # The flat compile key means regional compile with graph breaks allowed (see __post_init__).
        return tuple(dataclasses.replace(c, fullgraph=False) if c.technique == "compile" else c
                     for c in super().parse_flat_accelerations(flat))  # fmt: skip

    def _resolve_schedule(self) -> None:
        """An unset ``schedule`` from the folder's pipeline class (else :data:`PRESET_SCHEDULE`);
        ``schedule_source`` says which."""
        if self.schedule is not None:
            object.__setattr__(self, "schedule_source", "option")
            return
        found = folder_pipeline_class(self.model_path) if self.model_path else None
        schedule = _SCHEDULE_OF_PIPELINE.get(found[0]) if found else None
        if schedule is None:  # no folder, or one the loader will refuse (it names the problem)
            object.__setattr__(self, "schedule", PRESET_SCHEDULE)
            object.__setattr__(self, "schedule_source", "preset" if not self.model_path else "default (folder index unreadable)")
        else:
            object.__setattr__(self, "schedule", schedule)
            object.__setattr__(self, "schedule_source", f"{found[1].name} _class_name {found[0]}")

    @property
    def schedule_spec(self) -> Schedule:
        return SCHEDULES[self.schedule]  # type: ignore[index]

    @property
    def num_steps(self) -> int:
        return self.steps if self.steps is not None else self.schedule_spec.steps

    def folder_guidance_scale(self) -> float | None:
        """The guidance scale of the folder's guider config (``guider/guider_config.json``), or
        None without one. Raises :class:`BadInputError` naming an unreadable or invalid file."""
        if not self.model_path or not (Path(self.model_path) / GUIDER_CONFIG).is_file():
            return None
        g = self.folder_json(GUIDER_CONFIG).get("guidance_scale")
        if not isinstance(g, (int, float)) or isinstance(g, bool) or not 1.0 <= float(g) <= 30.0:
            raise BadInputError(Path(self.model_path) / GUIDER_CONFIG, f"guidance_scale {g!r} is not a number 1..30")
        return float(g)

    @property
    def cfg_scale(self) -> float:
        if self.guidance_scale is not None:
            return self.guidance_scale
        folder = self.folder_guidance_scale()
        return folder if folder is not None else self.schedule_spec.guidance_scale

    def preset_scheduler_config(self) -> dict[str, Any]:
        return {"num_train_timesteps": 1000, "shift": self.preset_spec.flow_shift}

    def model_defaults(self) -> dict[str, Any]:
        info = {**super().model_defaults(), "schedule": self.schedule, "schedule_from": self.schedule_source,
                "steps": self.schedule_spec.steps}  # fmt: skip
        try:
            folder_g = self.folder_guidance_scale()
        except BadInputError as exc:
            info["guidance_scale"] = f"unreadable: {exc}"
        else:
            info["guidance_scale"] = folder_g if folder_g is not None else self.schedule_spec.guidance_scale
            info["guidance_from"] = GUIDER_CONFIG if folder_g is not None else f"{self.schedule_spec.stock_pipeline} guider"
        return {**info, "prev_frames": 1, "model_fps": RELEASED_FPS, "prompt": CAPTION_PROMPT, "negative_prompt": "",
                "prompt_ref": REFERENCE_PROMPT}  # fmt: skip
