"""wan-animate-2 driven by a real video: the loop's 24 fps driving clip feeds Tier 1 (its first
frame the CLIP context), the output is re-timed to the loop's frames, and the prompt is the
persona's caption in Tier 2. Tiny preset, CPU, random weights; ``pair`` from this folder's conftest."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("diffusers")

from newsmotion_engine.guidance import driver  # noqa: E402
from newsmotion_engine.render import RenderSpec, get_backend  # noqa: E402
from newsmotion_engine.render.backends.wan_animate_2.backend import retime_frames  # noqa: E402
from newsmotion_engine.render.backends.wan_animate_2.caption import persona_caption  # noqa: E402

SPEC = RenderSpec(width=64, height=128)


def _backend(**kw):
    return get_backend("wan-animate-2", **{"preset": "tiny", "device": "cpu", "dtype": "float32", "steps": 2, **kw})


def _own_storage(loop, tmp_path):
    """The loop moved into a storage layout of its own (motion/preprocessed/{loop}), so a user clip
    dropped beside it is seen by this test only."""
    path = tmp_path / "motion" / "preprocessed" / loop.loop_id
    path.mkdir(parents=True)
    return dataclasses.replace(loop, path=path)


def test_retime_blends_neighbours_and_wraps_to_the_first_frame():
    src = [np.full((1, 1, 3), v, np.uint8) for v in (0, 40, 80, 120)]
    finished = []

    def gen():
        yield from src
        finished.append(True)

    out = [int(f[0, 0, 0]) for f in retime_frames(gen(), 4, 5)]
    # positions 0, 0.8, 1.6, 2.4, 3.2 (the last one between frame 3 and frame 0)
    assert out == [0, 32, 64, 96, 96] and finished == [True]
    assert [int(f[0, 0, 0]) for f in retime_frames(iter(src), 4, 4)] == [0, 40, 80, 120]
    with pytest.raises(RuntimeError, match="emitted 2 frames, expected 4"):
        list(retime_frames(iter(src[:2]), 4, 5))


def test_tier1_is_encoded_from_the_real_driving_clip_and_its_first_frame(pair):
    from diffusers.modular_pipelines.wan_animate_2.encoders import clip_visual_encode

    from newsmotion_engine.render.backends.wan_animate_2.backend import _pixels
    from newsmotion_engine.render.backends.wan_animate_2.components import load_image_encoder

    loop, persona = pair
    backend = _backend()
    assert backend.prepare_guidance(loop, SPEC)
    clip = driver.load_driving_clip(loop, SPEC.width, SPEC.height)
    assert clip.origin == "driver-render" and clip.frames.shape[0] == 10  # 13 frames at 30 fps = 10 at 24
    plan = backend.plan(10)
    assert backend._loop_frames(loop, SPEC) == 10 and plan.segments == 2
    np.testing.assert_array_equal(backend._driving_frames(loop, SPEC, plan, 0), clip.frames[:9])
    second = backend._driving_frames(loop, SPEC, plan, 1)  # frames 8.. then cyclic from 0
    np.testing.assert_array_equal(second[:2], clip.frames[8:10])
    np.testing.assert_array_equal(second[2], clip.frames[0])
    params = backend.guidance_params(loop, SPEC, plan)[1]
    assert params["driving"] == {"origin": "driver-render", "fps": 24, "digest": clip.digest} and "prompt" not in params
    g = backend.load_guidance(loop, SPEC)
    enc = load_image_encoder(backend.options, backend.components.device)
    with torch.no_grad():
        want = clip_visual_encode(enc, _pixels(clip.frames[:1])[0, :, 0], backend.components.device, enc.dtype).float().numpy()
    np.testing.assert_allclose(np.asarray(g.clip_context), want, atol=1e-5)


def test_a_user_clip_rebuilds_tier1(pair, tmp_path):
    import cv2

    loop, _ = pair
    loop = _own_storage(loop, tmp_path)
    backend = _backend()
    backend.prepare_guidance(loop, SPEC)
    assert not backend.prepare_guidance(loop, SPEC)
    folder = driver.user_clips_dir(tmp_path / "motion")
    folder.mkdir(parents=True)
    out = cv2.VideoWriter(str(folder / "nod.mp4"), cv2.VideoWriter_fourcc(*"mp4v"), 24, (64, 128))
    for k in range(12):
        out.write(np.full((128, 64, 3), 20 * k, np.uint8))
    out.release()
    assert backend.prepare_guidance(loop, SPEC)  # a new clip: Tier 1 rebuilt from it
    assert backend.guidance_params(loop, SPEC, backend.plan(10))[1]["driving"]["origin"] == "user"


def test_the_prompt_is_the_persona_caption_in_tier2_and_output_is_at_the_loop_frames(pair):
    loop, persona = pair
    backend = _backend()
    backend.prepare_guidance(loop, SPEC)
    assert backend.prepare_persona(persona, SPEC)
    caption = persona_caption(persona, SPEC.background)
    assert "green background" in caption
    assert backend.persona_params(persona, SPEC)[1]["prompt"] == caption
    assert backend.load_persona(persona, SPEC).prompt_embeds.shape[:2] == (1, 512)
    frames = list(backend.frames(loop, persona, loop.keypoints, SPEC))
    assert len(frames) == loop.frames == 13 and frames[0].shape == (128, 64, 3)  # re-timed 10 -> 13
    info = backend.describe()
    assert "persona caption" in info["prompt"] and "driving clip" in info["driving_video"] and info["chroma"] == "matte"
    assert info["prompt_used"] == caption
    # An explicit prompt is the persona tier's only: Tier 1 is reused, Tier 2 rebuilt.
    other = _backend(prompt="a presenter in a grey suit")
    assert not other.prepare_guidance(loop, SPEC) and other.prepare_persona(persona, SPEC)


def test_persona_caption_says_what_the_persona_cache_knows():
    class P:
        metadata = {"visible_parts": ["body", "face", "left_hand"]}

    assert persona_caption(P(), (0, 177, 64)) == (
        "a news presenter, waist-up, hands visible, facing the camera and speaking, in a studio, "
        "in front of a plain green background")  # fmt: skip
    P.metadata = {"visible_parts": ["face"]}
    assert "head and shoulders" in persona_caption(P(), (0, 71, 187)) and "plain blue background" in persona_caption(P(), (0, 71, 187))
