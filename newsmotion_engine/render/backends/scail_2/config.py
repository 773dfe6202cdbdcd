"""Configuration of the ``scail-2`` backend as data: presets and :class:`Scail2Options`.

Defaults are the official inference code's (zai-org/SCAIL-2, ``wan-scail2`` branch: ``generate.py``
and ``wan/scail.py``'s ``SCAIL2Pipeline.generate``; read through a public fork of that branch,
``minghaop/scail2_exp``, since the branch itself is not in the searchable sources): 40 steps, CFG
5.0 with an empty negative prompt, flow-matching UniPC with shift 3.0, 81-frame segments, each
after the first continuing from the previous segment's last 5 decoded frames (clean history),
animation mode unless asked for replacement.

Modes (``mode``): ``"animation"`` (the reference image's person and background, moved by the
driving video) or ``"replacement"`` (the driving video's scene kept, its person replaced by the
reference's: the official ``replace_flag``, which shifts the reference's RoPE 120 rows and starts the
video at time 0). In both the driving mask is the driving person's matte (the region replaced).

Sizes: the driving tokens are at half the latent size and patched 2x2, so the model's sides must
be multiples of 32 (the official README: "H and W should be both divisible by 32, e.g. 704*1280").
A render of another size runs at the largest multiple-of-32 size inside it (720x1280 -> 704x1280)
and is framed onto the spec with its background (:func:`model_size`).

Accelerations (the typed configs of :mod:`newsmotion_engine.accel`): ``Fp8Linears``, ``Attention``
(any kernel: the self-attention is a plain unmasked Wan ``attn1`` over the whole in-context
sequence), ``Compile``, ``FfnChunks``, ``VaeTiling``. Refused, with the reason: ``TeaCache``,
``CFGSchedule``, ``PyramidCascade``, ``SparseAttention`` (written for the Wan-Animate denoise
loop / token layout, not calibrated for this one) and ``ContextParallel`` (no plan for this model).

Presets (no model folder: **random weights**, labelled so everywhere):

- ``tiny``: two layers of width 24, 9-frame segments with a 5-frame history; CPU tests in seconds.
- ``14b``: the released SCAIL-2 DiT (``released/scail-2-14b/transformer/config.json``: 40 layers,
  40 heads x 128, FFN 13824) with the Wan2.1 VAE, CLIP ViT-H/14 and UMT5-XXL.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from newsmotion_engine.accel.registry import AccelConfig
from newsmotion_engine.render.base import BackendOptionError
from newsmotion_engine.render.backends.wan.diffusers_config import COMPILE_VAE_REFUSED, DTYPES, ONE_KEY_CROSS_REFUSED, RANDOM_WEIGHTS_LABEL, DiffusersOptions

__all__ = ["MODES", "NAME", "PRESETS", "RANDOM_WEIGHTS_LABEL", "Preset", "Scail2ConfigError", "Scail2Options", "model_size"]

NAME = "scail-2"
MODEL_DIR_ENV = "NEWSMOTION_MODEL_DIR_SCAIL2"
MODES = ("animation", "replacement")
SIZE_MULTIPLE = 32  # VAE x8, driving tokens at half size, patch x2
RELEASED_STEPS = 40
RELEASED_GUIDANCE = 5.0
RELEASED_SHIFT = 3.0
RELEASED_SEGMENT_FRAMES = 81
HISTORY_FRAMES = 5  # official segment_overlap: the previous segment's last frames, clean
# The model is trained with long descriptive prompts; the motion comes from the driving video.
DEFAULT_PROMPT = ("a news presenter in a studio, facing the camera and speaking, gesturing naturally with the hands and "
                  "arms, upper body visible, steady camera, sharp focus, natural lighting")  # fmt: skip


class Scail2ConfigError(BackendOptionError):
    """A scail-2 option that is unknown, out of range or does not apply to this model."""


@dataclass(frozen=True)
class Preset:
    """One architecture: constructor kwargs per component."""

    name: str
    transformer: dict[str, Any]  # SCAIL2Transformer3DModel kwargs (official config names)
    vae: dict[str, Any]  # AutoencoderKLWan kwargs
    image_encoder: dict[str, Any]  # transformers.CLIPVisionConfig kwargs
    text_encoder: dict[str, Any]  # transformers.UMT5Config kwargs
    segment_frames: int = RELEASED_SEGMENT_FRAMES


WAN21_COMPONENTS = "wan-animate"  # wan/released: the Wan 2.1 VAE, CLIP ViT-H/14 and UMT5-XXL configs SCAIL-2 uses too


def _released_14b() -> Preset:
    from newsmotion_engine.render.backends.scail_2.released import transformer_kwargs
    from newsmotion_engine.render.backends.wan.released import component_kwargs

    return Preset("14b", transformer_kwargs(), component_kwargs(WAN21_COMPONENTS, "vae"),
                  component_kwargs(WAN21_COMPONENTS, "image_encoder"), component_kwargs(WAN21_COMPONENTS, "text_encoder"))


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
    "14b": _released_14b(),
}

_REFUSED = {
    "teacache": "its skip rule is calibrated on the Wan-Animate denoise loop, not SCAIL-2's",
    "cfg": "the CFG schedules are wired into the Wan-Animate denoise loops only",
    "pyramid": "the cascade's re-noising is written for the Wan-Animate token layout",
    "sparse_attention": "the block-sparse layout is written for Wan-Animate's frame grid, not the in-context [reference | video | driving] sequence",
    "context_parallel": "there is no context-parallel plan for SCAIL2Transformer3DModel",
    "compile_vae": COMPILE_VAE_REFUSED,
    "one_key_cross": ONE_KEY_CROSS_REFUSED,
}


def model_size(width: int, height: int) -> tuple[int, int]:
    """The size the model renders a ``width`` x ``height`` clip at: the largest multiple-of-32
    size inside it (the output is framed onto the full size)."""
    return width // SIZE_MULTIPLE * SIZE_MULTIPLE, height // SIZE_MULTIPLE * SIZE_MULTIPLE


@dataclass(frozen=True)
class Scail2Options(DiffusersOptions):
    """Every ``scail-2`` option (:meth:`from_mapping` parses the flat keys).

    Model:
        model_path: a SCAIL-2 folder (see ``components``; default ``$NEWSMOTION_MODEL_DIR_SCAIL2``);
            none -> ``preset`` with random weights. device, dtype: as the other diffusion backends.
    Sampling:
        mode: ``"animation"`` (default) or ``"replacement"``.
        steps (default 40), guidance_scale (default 5.0; 1.0 skips the unconditional pass).
        batch_cfg: run the conditional and unconditional passes as one batch of two (the same
            arithmetic per sample, one launch per layer instead of two; twice the activations).
            Off by default: the official sampler runs them one after the other.
        segment_frames: frames per segment (4k+1, more than the 5-frame history; default 81 with a
            model folder, else the preset's: 9 for ``tiny``).
        prompt: default :data:`DEFAULT_PROMPT` (persona-free, cached per loop); negative_prompt
            (default empty, as the official generate).
    Accelerations:
        accelerations: typed configs (see the module docstring for which apply).
    Tests:
        cache_root: where sub-caches go (default: inside the parent caches).
    """

    backend: ClassVar[str] = NAME
    config_error: ClassVar[type[BackendOptionError]] = Scail2ConfigError
    refused_accelerations: ClassVar[Mapping[str, str]] = _REFUSED
    model_dir_env: ClassVar[str] = MODEL_DIR_ENV
    presets: ClassVar[Mapping[str, Preset]] = PRESETS
    released_segment_frames: ClassVar[int] = RELEASED_SEGMENT_FRAMES
    default_scheduler: ClassVar[str] = "UniPCMultistepScheduler"
    mode: str = "animation"
    steps: int | None = None
    guidance_scale: float | None = None
    batch_cfg: bool = False
    segment_frames: int | None = None
    prompt: str | None = None
    negative_prompt: str = ""
    accelerations: tuple[AccelConfig, ...] = ()
    cache_root: str | None = None

    def __post_init__(self) -> None:
        self._check_choice("preset", PRESETS)
        self._check_choice("dtype", DTYPES)
        self._check_choice("mode", MODES)
        if self.steps is not None:
            self._check_steps()
        if self.guidance_scale is not None:
            self._check_guidance_scale()
            object.__setattr__(self, "guidance_scale", float(self.guidance_scale))
        if not isinstance(self.batch_cfg, bool):
            raise self._bad("batch_cfg", "use true or false")
        self._check_segment_frames(example=81)
        if self.segment_frames is not None and self.segment_frames <= HISTORY_FRAMES:
            raise self._bad("segment_frames", f"use more than the {HISTORY_FRAMES}-frame history (e.g. 81)")
        self._check_strings(optional=("prompt", "model_path", "cache_root"), required=("negative_prompt",))
        self._check_lora()
        object.__setattr__(self, "accelerations", self._ordered_accelerations())

    @property
    def num_steps(self) -> int:
        return self.steps if self.steps is not None else RELEASED_STEPS

    @property
    def cfg_scale(self) -> float:
        return self.guidance_scale if self.guidance_scale is not None else RELEASED_GUIDANCE

    @property
    def prompt_text(self) -> str:
        return self.prompt if self.prompt is not None else DEFAULT_PROMPT

    @property
    def replace(self) -> bool:
        return self.mode == "replacement"

    def preset_scheduler_config(self) -> dict[str, Any]:
        # Wan's FlowUniPCMultistepScheduler as diffusers writes it (the Wan releases' scheduler config).
        return {"num_train_timesteps": 1000, "prediction_type": "flow_prediction", "use_flow_sigmas": True,
                "flow_shift": RELEASED_SHIFT}  # fmt: skip

    def model_defaults(self) -> dict[str, Any]:
        return {**super().model_defaults(), "mode": "animation", "steps": RELEASED_STEPS, "guidance_scale": RELEASED_GUIDANCE,
                "history_frames": HISTORY_FRAMES, "prompt": DEFAULT_PROMPT, "negative_prompt": ""}  # fmt: skip
