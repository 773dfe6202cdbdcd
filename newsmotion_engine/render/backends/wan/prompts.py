"""The Wan models' text prompts: the animate prompt and negative prompt the released models were
trained and sampled with, and the ``prompt`` option's ``"loop"`` value (the canonical loop's own text)."""

from __future__ import annotations

from typing import Any

__all__ = ["LOOP_PROMPT", "WAN_ANIMATE_PROMPT", "WAN_NEGATIVE_PROMPT", "loop_prompt"]

WAN_ANIMATE_PROMPT = "视频中的人在做动作"  # "the person in the video is moving"
LOOP_PROMPT = "loop"  # prompt="loop": the canonical loop's own text instead
# Wan2.2's default negative prompt (``sample_neg_prompt``, wan/configs/shared_config.py), which its
# animate pipeline uses when none is given (it only acts with CFG, guidance_scale > 1). Roughly:
# garish colours, overexposed, static, blurry details, subtitles, ... worst quality, low quality,
# JPEG artefacts, ugly, mutilated, extra fingers, badly drawn hands and face, deformed limbs,
# fused fingers, a motionless picture, a cluttered background, three legs, many people in the
# background, walking backwards.
WAN_NEGATIVE_PROMPT = (
    "色调艳丽，过曝，静态，细节模糊不清，字幕，风格，作品，画作，画面，静止，整体发灰，最差质量，低质量，JPEG压缩残留，"
    "丑陋的，残缺的，多余的手指，画得不好的手部，画得不好的脸部，畸形的，毁容的，形态畸形的肢体，手指融合，"
    "静止不动的画面，杂乱的背景，三条腿，背景人很多，倒着走"
)


def loop_prompt(guidance: Any, override: str | None = None, default: str | None = None) -> str:
    """The text prompt for a loop: ``override`` (the ``prompt`` option) as given; ``"loop"``: the
    canonical loop's own text (``default`` for a custom loop); unset: ``default``, Wan's animate
    prompt unless given."""
    default = default or WAN_ANIMATE_PROMPT
    if override == LOOP_PROMPT:
        from newsmotion_engine.guidance.catalogue import canonical_loops

        spec = canonical_loops().get(getattr(guidance, "loop_id", ""))
        return spec.prompt if spec is not None else default
    return override or default
