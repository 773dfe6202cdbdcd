"""wan-animate backend on the tiny preset (CPU, random weights): end to end through render_clip,
the two-tier caches (built by prepare_*, only loaded by frames: at render time only the VAE
encodes the clip's pose video), the pose video's placement on the reference person, and bad
input. ``pair`` and ``encoder_calls`` come from this folder's conftest."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("diffusers")

from newsmotion_engine.errors import BadInputError, CacheMissingError, CacheNotReadyError, CacheStaleError  # noqa: E402
from newsmotion_engine.render import RenderSpec, get_backend, render_clip  # noqa: E402
from newsmotion_engine.render.base import (  # noqa: E402
    BackendCacheMissingError,
    BackendCacheStaleError,
    BackendOptionError,
    InvalidSpecError,
)
from newsmotion_engine.render.backends import wan_animate  # noqa: E402
from newsmotion_engine.render.backends.wan_animate.config import WanAnimateConfigError  # noqa: E402
from newsmotion_engine.render.backends.wan import artifacts, continuation, encoders  # noqa: E402

wan_animate.register()


SPEC = RenderSpec(width=64, height=64)


def _backend(**kw):
    return get_backend("wan-animate", **{"preset": "tiny", "steps": 2, "device": "cpu", "dtype": "float32", **kw})


def _prepare(backend, loop, persona, spec=SPEC):
    return backend.prepare_guidance(loop, spec), backend.prepare_persona(persona, spec)


def test_tiny_render_end_to_end_through_render_clip(pair, tmp_path):
    loop, persona = pair
    backend = _backend()
    assert _prepare(backend, loop, persona) == (True, True)
    tele = render_clip(loop, persona, backend, SPEC, tmp_path / "out.mp4")
    assert tele.frames == 13 and (tmp_path / "out.mp4").stat().st_size > 0
    info = tele.backend_info
    assert info["weights"] == "random weights" and "random weights" in info["note"]
    assert info["last_render"]["segments"] == 2  # 13 frames in 9-frame segments overlapping by 1
    assert info["last_render"]["pose_encode_s"] > 0 and "Wan-Animate's training style" in info["pose_video"]
    meta = json.loads((loop.path / "wan-animate" / "64x64" / "metadata.json").read_text())
    assert meta["weights"] == "random weights" and meta["params"]["size"] == [64, 64]
    assert "pose_latents.safetensors" not in meta["files"] and not (loop.path / "wan-animate" / "64x64" / "pose_latents.safetensors").exists()
    assert meta["source"]["sha256"] == "a" * 64
    backend.close()


def test_frames_without_prepare_names_what_to_build_and_builds_nothing(pair, encoder_calls):
    loop, persona = pair
    backend = _backend()
    backend.load()
    with pytest.raises(BackendCacheMissingError) as info:
        list(backend.frames(loop, persona, loop.keypoints, SPEC))
    msg = str(info.value)
    assert "wan-animate guidance artifacts for loop 'nod' at 64x64 are missing" in msg
    assert "materialize backend_guidance_cache[nod]" in msg and "newsmotion render" in msg
    assert isinstance(info.value, CacheMissingError) and isinstance(info.value, CacheNotReadyError)
    assert (info.value.asset, info.value.cache_id, info.value.state) == ("backend_guidance_cache", "nod", "missing")
    assert encoder_calls.calls == {"vae.encode": 0, "image_encoder": 0, "text_encoder": 0}
    assert not (loop.path / "wan-animate").exists() and not (persona.path / "wan-animate").exists()
    # With the guidance side built, the persona side is the one named.
    backend.prepare_guidance(loop, SPEC)
    with pytest.raises(BackendCacheMissingError, match=r"persona artifacts for persona 'anna'.*backend_persona_cache\[anna\]"):
        list(backend.frames(loop, persona, loop.keypoints, SPEC))
    assert not (persona.path / "wan-animate").exists()


def test_only_the_pose_video_is_encoded_at_render_time(pair, encoder_calls, monkeypatch):
    from newsmotion_engine.render.backends.wan_animate import caches as C

    loop, persona = pair
    backend = _backend()
    backend.load()
    assert _prepare(backend, loop, persona) == (True, True)
    built = dict(encoder_calls.calls)
    assert built["vae.encode"] > 0 and built["image_encoder"] == 1 and built["text_encoder"] == 1
    encoder_calls.calls.update({k: 0 for k in encoder_calls.calls})
    assert _prepare(backend, loop, persona) == (False, False)  # current: validated, not rebuilt
    encoded = []
    real = C.encode_pose_latents
    monkeypatch.setattr(C, "encode_pose_latents", lambda vae, frames, plan, device: encoded.append((frames, plan)) or real(vae, frames, plan, device))
    frames = list(backend.frames(loop, persona, loop.keypoints, SPEC))
    assert len(frames) == 13 and frames[0].shape == (64, 64, 3) and frames[0].dtype == np.uint8
    assert encoder_calls.calls["image_encoder"] == 0 and encoder_calls.calls["text_encoder"] == 0
    # The pose video: drawn on the persona from the keypoints the render was given, one encode per clip.
    assert len(encoded) == 1 and encoded[0][1].segments == 2
    assert np.array_equal(encoded[0][0], C.pose_frames(persona, loop.keypoints, SPEC.width, SPEC.height))
    # Another resolution is another cache: built (encoders run), never the 64x64 one reused.
    assert _prepare(backend, loop, persona, RenderSpec(width=96, height=64)) == (True, True)
    assert encoder_calls.calls["vae.encode"] > 0


def test_stale_cache_is_refused_at_render_time_and_rebuilt_by_prepare(pair):
    loop, persona = pair
    backend = _backend()
    _prepare(backend, loop, persona)
    loop.metadata = {"source": {"kind": "authored", "sha256": "c" * 64}}  # the loop changed
    with pytest.raises(BackendCacheStaleError, match="guidance artifacts for loop 'nod' at 64x64 are stale") as info:
        list(backend.frames(loop, persona, loop.keypoints, SPEC))
    assert isinstance(info.value, CacheStaleError)
    assert _prepare(backend, loop, persona) == (True, False)
    other = _backend(prompt="a different prompt")
    assert other.prepare_guidance(loop, SPEC) is True


def test_same_seed_same_frames_and_teacache_cfg_options(pair):
    loop, persona = pair
    plain = _backend()
    _prepare(plain, loop, persona)
    a = list(plain.frames(loop, persona, loop.keypoints, SPEC))
    b = list(_backend().frames(loop, persona, loop.keypoints, SPEC))
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    accel = _backend(teacache=10.0, teacache_warmup=1, guidance_scale=3.0, cfg_every=2, steps=4)
    _prepare(accel, loop, persona)
    frames = list(accel.frames(loop, persona, loop.keypoints, SPEC))
    assert len(frames) == 13
    info = accel.describe()
    stats = info["last_render"]
    assert stats["teacache_skipped"] > 0
    assert stats["uncond_passes"] < stats["cond_passes"] and stats["cfg_flops_saved"] > 0
    assert info["accelerations"]["teacache"]["threshold"] == 10.0 and info["accelerations"]["cfg"]["every"] == 2
    assert info["accel_report"]["teacache"]["threshold"] == 10.0


def test_bad_options_and_sizes(pair):
    with pytest.raises(WanAnimateConfigError, match="unknown wan-animate option.*stepz.*known:.*teacache"):
        get_backend("wan-animate", stepz=3)
    with pytest.raises(WanAnimateConfigError, match="segment_frames"):
        get_backend("wan-animate", segment_frames=10)
    with pytest.raises(BackendOptionError, match=r"wan-animate option cfg_start=0\.6, cfg_stop=0\.4: CFG window"):
        get_backend("wan-animate", cfg_start=0.6, cfg_stop=0.4)
    with pytest.raises(BackendOptionError, match="teacache=-1.*threshold"):
        get_backend("wan-animate", teacache=-1)
    loop, persona = pair
    with pytest.raises(InvalidSpecError, match="divisible by 16"):
        list(_backend().frames(loop, persona, loop.keypoints, RenderSpec(width=72, height=64)))


def _model_folder(root: Path, pipeline: str = "WanAnimatePipeline", transformer: str = "WanAnimateTransformer3DModel") -> Path:
    root.mkdir(parents=True)
    (root / "model_index.json").write_text(json.dumps({"_class_name": pipeline}))
    for sub, name in (("transformer", "config.json"), ("vae", "config.json"), ("scheduler", "scheduler_config.json"),
                      ("image_encoder", "config.json"), ("image_processor", "preprocessor_config.json"),
                      ("text_encoder", "config.json"), ("tokenizer", "tokenizer_config.json")):  # fmt: skip
        (root / sub).mkdir(parents=True, exist_ok=True)
        (root / sub / name).write_text(json.dumps({"_class_name": transformer if sub == "transformer" else "x"}))
        if sub in ("transformer", "vae", "image_encoder", "text_encoder"):
            (root / sub / "model.safetensors").write_bytes(b"\0" * 8)
    return root


def test_model_folder_errors_name_the_problem(tmp_path):
    with pytest.raises(BadInputError, match="does not exist"):
        _backend(model_path=str(tmp_path / "nope")).load()
    folder = _model_folder(tmp_path / "m")
    (folder / "vae" / "config.json").unlink()
    with pytest.raises(BadInputError, match=r"vae/config.json.*missing"):
        _backend(model_path=str(folder)).load()
    wrong = _model_folder(tmp_path / "w", pipeline="WanPipeline")
    with pytest.raises(BadInputError, match="wrong architecture"):
        _backend(model_path=str(wrong)).load()
    wrong_t = _model_folder(tmp_path / "t", transformer="WanTransformer3DModel")
    with pytest.raises(BadInputError, match="WanTransformer3DModel.*wrong architecture"):
        _backend(model_path=str(wrong_t)).load()


def test_cuda_oom_names_the_memory_settings(pair, monkeypatch):
    from newsmotion_engine.render.backends.wan_animate import backend as backend_mod
    from newsmotion_engine.render.backends.wan_animate import denoise

    def oom(*a, **k):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20 GiB")

    monkeypatch.setattr(denoise, "denoise_segment", oom)
    loop, persona = pair
    backend = _backend()
    _prepare(backend, loop, persona)
    with pytest.raises(backend_mod.WanAnimateOOMError, match="fp8='auto'.*vae_tiling=True.*ffn_chunks=8"):
        list(backend.frames(loop, persona, loop.keypoints, SPEC))


def test_channels_last_convs_only_on_cuda_by_default_and_decode_the_same():
    """The VAE's conv weights go channels-last on a CUDA device (faster cuDNN kernels, measured in
    benchmarks/results/vae_decode_h200.json); on the CPU the default leaves them as they are.
    Forced on the CPU, the decode is the same up to float32 rounding."""
    import torch

    from newsmotion_engine.render.backends.wan.components import build_vae, channels_last_convs
    from newsmotion_engine.render.backends.wan_animate_2 import denoise as D
    from newsmotion_engine.render.backends.wan_animate_2.config import WanAnimate2Options

    opts = WanAnimate2Options.from_mapping({"preset": "tiny", "device": "cpu", "dtype": "float32"})
    vae = build_vae(opts, torch.device("cpu"), torch.float32)
    convs = [m for m in vae.modules() if isinstance(m, (torch.nn.Conv3d, torch.nn.Conv2d))]
    assert convs and all(m.weight.is_contiguous() for m in convs)
    lat = torch.randn(16, 4, 16, 8, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        plain = D.decode_segment(vae, lat)
        channels_last_convs(vae, True)
        assert all(m.weight.is_contiguous(memory_format=torch.channels_last_3d if m.weight.dim() == 5 else torch.channels_last)
                   for m in convs)  # fmt: skip
        assert (D.decode_segment(vae, lat) - plain).abs().max() < 1e-4
        channels_last_convs(vae, False)
        assert torch.equal(D.decode_segment(vae, lat), plain)


# ---------------------------------------------------------------------- pose video


def _centroid(frame, colour):
    ys, xs = np.nonzero((frame == np.array(colour, np.uint8)).all(axis=-1))
    assert xs.size, f"colour {colour} not drawn"
    return np.array([xs.mean(), ys.mean()])


@pytest.mark.parametrize("width, height", [(288, 512), (720, 720), (512, 288)])
def test_pose_video_lies_on_the_reference_person_unstretched(synth, width, height):
    """The pose video is the retargeted pose drawn where the reference frame places the portrait:
    the drawn shoulders and neck land on the persona's own (within a pixel or two), and at any
    aspect ratio shoulder width : torso height is the persona's (no stretch)."""
    from newsmotion_engine.render.clip import retargeted_keypoints
    from newsmotion_engine.render.backends.wan_animate import caches as C
    from newsmotion_engine.render.placement import place_portrait
    from newsmotion_engine.skeleton import BODY

    # A persona of other proportions than the loop's rig (higher, broader shoulders).
    persona = synth.make_persona(144, 256, neck_y=0.45, shoulder_half=0.2)
    loop = synth.make_loop(13)
    kp = retargeted_keypoints(loop, persona)
    frame = C.pose_frames(persona, kp, width, height)[0]  # frame 0: the loop's rest pose
    ox, oy, pw, ph = place_portrait(persona.portrait.shape[:2], width, height)
    on_ref = lambda i: np.array([ox + persona.landmarks[i, 0] * pw, oy + persona.landmarks[i, 1] * ph])  # noqa: E731
    r_sh, l_sh = on_ref(BODY["right_shoulder"]), on_ref(BODY["left_shoulder"])
    # Wan's colours: right shoulder (255, 170, 0), left shoulder (85, 255, 0), neck (255, 85, 0).
    assert np.abs(_centroid(frame, (255, 170, 0)) - r_sh).max() <= 1.5
    assert np.abs(_centroid(frame, (85, 255, 0)) - l_sh).max() <= 1.5
    assert np.abs(_centroid(frame, (255, 85, 0)) - (r_sh + l_sh) / 2).max() <= 1.5
    # The loop's own rig would have put the shoulders elsewhere: the check can fail.
    assert abs(loop.keypoints[0, BODY["right_shoulder"], 1] * height - r_sh[1]) > 10
    # Proportions: shoulder width over neck-to-mid-hip height, drawn vs the persona's portrait.
    neck = _centroid(frame, (255, 85, 0))
    hips = (_centroid(frame, (0, 255, 170)) + _centroid(frame, (0, 85, 255))) / 2  # right, left hip
    drawn = (_centroid(frame, (85, 255, 0))[0] - _centroid(frame, (255, 170, 0))[0]) / (hips[1] - neck[1])
    lm = persona.landmarks[:, :2] * (144, 256)
    own = (lm[BODY["left_shoulder"], 0] - lm[BODY["right_shoulder"], 0]) / (
        (lm[BODY["left_hip"], 1] + lm[BODY["right_hip"], 1]) / 2 - (lm[BODY["left_shoulder"], 1] + lm[BODY["right_shoulder"], 1]) / 2)
    assert drawn == pytest.approx(own, rel=0.03)


def test_pose_latents_encode_each_segment_of_the_pose_video(pair):
    """One VAE encoding per segment of the pose video; a segment past the clip's end wraps around."""
    from newsmotion_engine.render.backends.wan_animate import caches as C

    loop, persona = pair
    backend = _backend()
    backend.load()
    vae, device = backend.components.vae, backend.components.device
    plan = backend.plan(13)
    frames = C.pose_frames(persona, loop.keypoints, SPEC.width, SPEC.height)
    lat = C.encode_pose_latents(vae, frames, plan, device)
    assert lat.shape == (plan.segments, 16, plan.latent_frames, SPEC.height // 8, SPEC.width // 8)
    idx = [(plan.start(1) + j) % 13 for j in range(plan.segment_frames)]  # the second segment wraps around
    assert torch.equal(lat[1:2], encoders.vae_encode(vae, encoders.to_video_tensor(frames[idx]), device))
    backend.close()


def test_guidance_sub_cache_with_pose_latents_is_rebuilt(pair):
    """A guidance sub-cache of the earlier format (pose latents inside, schema 1) is stale."""
    from newsmotion_engine.render.backends.wan_animate import caches as C

    loop, persona = pair
    backend = _backend()
    _prepare(backend, loop, persona)
    meta_path = loop.path / "wan-animate" / "64x64" / "metadata.json"
    meta = json.loads(meta_path.read_text())
    meta["schema_version"] = 1
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(BackendCacheStaleError, match="schema version 1"):
        list(backend.frames(loop, persona, loop.keypoints, SPEC))
    assert backend.prepare_guidance(loop, SPEC) is True
    assert json.loads(meta_path.read_text())["schema_version"] == C.GUIDANCE_SCHEMA_VERSION


# ---------------------------------------------------------------------- segment continuation


def _clip_loop(loop, frames):
    """``loop`` as a ``frames``-frame clip (the loop repeated: it is seamless)."""
    import dataclasses

    return dataclasses.replace(loop, keypoints=np.ascontiguousarray(loop.keypoints[np.arange(frames) % len(loop.keypoints)]))


def _stock_frames(backend, work, loop, persona, spec, noise1_seed):
    """The stock ``WanAnimatePipeline`` on the inputs ``work`` holds (pose video, face video,
    reference image, CLIP tokens, prompt embeddings, the first segment's noise; the second
    segment's noise from a generator seeded ``noise1_seed``): float frames in [0, 1]."""
    from diffusers import WanAnimatePipeline
    from PIL import Image

    from newsmotion_engine.render.backends.wan_animate import caches as C

    comps, o = backend.components, backend.options
    pipe = WanAnimatePipeline(tokenizer=None, text_encoder=None, vae=comps.vae, scheduler=comps.new_scheduler(),
                              image_processor=None, image_encoder=None, transformer=comps.transformer)  # fmt: skip
    pipe.set_progress_bar_config(disable=True)
    # The stock pipeline takes the reference image or CLIP tokens, not both, and would compute its
    # own tokens through CLIPImageProcessor (centre crop, not Wan's whole-frame resize): it is
    # handed ours instead.
    pipe.encode_image = lambda image, device: work.persona.image_tokens.to(device)
    pose = C.pose_frames(persona, loop.keypoints, spec.width, spec.height)
    ref = artifacts.reference_frame(persona, spec.width, spec.height, spec.background)
    with torch.no_grad():
        out = pipe(image=Image.fromarray(ref), pose_video=[Image.fromarray(f) for f in pose],
                   face_video=[Image.fromarray(f) for f in work.faces], prompt_embeds=work.guidance.prompt_embeds,
                   negative_prompt_embeds=work.guidance.negative_embeds,
                   height=spec.height, width=spec.width, segment_frame_length=work.plan.segment_frames,
                   prev_segment_conditioning_frames=work.plan.prev_frames, num_inference_steps=o.steps,
                   guidance_scale=o.guidance_scale, latents=work.noises[0],
                   generator=torch.Generator("cpu").manual_seed(noise1_seed), output_type="np")  # fmt: skip
    return out.frames[0]


def _ours(backend, work):
    """Every frame of ``work`` through the backend's three stages, in order."""
    frames = []
    for k in range(work.plan.segments):
        frames += list(backend.decode_clip_segment(work, k, backend.denoise_clip_segment(work, k)))
    return np.stack(frames)


@pytest.mark.parametrize("segment_frames, prev_frames, frames", [(9, 1, 17), (13, 5, 21)])
def test_parity_with_the_stock_pipeline_at_cfg_over_two_segments(pair, segment_frames, prev_frames, frames):
    """Our denoising (the backend's stages) against the stock ``WanAnimatePipeline`` fed the same
    inputs, at guidance 3.0 over two segments, across the seam: the stock pipeline continues the
    trained way (the previous segment's decoded tail, VAE-encoded), as ``continuation="frames"``
    does, and drops the repeated ``prev_frames`` as we do. Clip lengths fill whole segments
    (17 = 9 + 8, 21 = 13 + 8): the stock pipeline pads a clip by reflecting it, ours continues it
    cyclically, so only a whole-segment clip gives both the same pose and face frames. The second
    segment's noise is the stock pipeline's (its first draw from the generator it is given)."""
    loop, persona = pair
    clip = _clip_loop(loop, frames)
    backend = _backend(guidance_scale=3.0, steps=3, segment_frames=segment_frames, prev_frames=prev_frames)
    _prepare(backend, clip, persona)
    work = backend.plan_clip(clip, persona, clip.keypoints, SPEC)
    assert work.plan.segments == 2 and work.continuation == "frames"
    work.noises[1] = torch.randn(work.noises[1].shape, generator=torch.Generator("cpu").manual_seed(7))
    ours = _ours(backend, work)
    stock = (np.clip(_stock_frames(backend, work, clip, persona, SPEC, 7), 0, 1) * 255).round().astype(np.uint8)
    assert ours.shape == stock.shape == (frames, SPEC.height, SPEC.width, 3)
    diff = np.abs(ours.astype(int) - stock.astype(int))
    seam = segment_frames  # the first frame of the second segment's own
    assert diff[:seam].max() <= 1 and diff[seam:].max() <= 1, (diff[:seam].max(), diff[seam:].max())
    # Not equal by accident: the latent continuation (not as trained) leaves the stock pipeline at the seam.
    latent = _backend(guidance_scale=3.0, steps=3, segment_frames=segment_frames, prev_frames=prev_frames, continuation="latent")
    lwork = latent.plan_clip(clip, persona, clip.keypoints, SPEC)
    lwork.noises[1] = work.noises[1]
    other = _ours(latent, lwork)
    assert np.array_equal(other[:seam], ours[:seam]) and np.abs(other[seam:].astype(int) - stock[seam:]).max() > 8


def _spy_inputs(monkeypatch):
    """Record the ``SegmentInputs`` of every segment the denoiser runs."""
    from newsmotion_engine.render.backends.wan_animate import denoise

    seen, real = [], denoise.denoise_segment

    def spy(transformer, scheduler, latents, inputs, **kw):
        seen.append(inputs)
        return real(transformer, scheduler, latents, inputs, **kw)

    monkeypatch.setattr(denoise, "denoise_segment", spy)
    return seen


@pytest.mark.parametrize("prev_frames", [1, 5])
def test_seam_conditioning_is_the_vae_encoding_of_the_decoded_tail(pair, monkeypatch, encoder_calls, prev_frames):
    """Segment 2 reads, where the model was trained to read them, the VAE encoding of segment 1's
    last ``prev_frames`` decoded frames (before uint8 rounding) followed by zero frames, with the
    mask marking ``prev_frames`` pixel frames known; and it cannot denoise before that decode."""
    from newsmotion_engine.render.backends.wan import decode as wan_decode

    loop, persona = pair
    seg = 9 if prev_frames == 1 else 13
    clip = _clip_loop(loop, seg + (seg - prev_frames))
    backend = _backend(segment_frames=seg, prev_frames=prev_frames)
    _prepare(backend, clip, persona)
    seen = _spy_inputs(monkeypatch)
    work = backend.plan_clip(clip, persona, clip.keypoints, SPEC)
    encoder_calls.calls.update({k: 0 for k in encoder_calls.calls})
    lat0 = backend.denoise_clip_segment(work, 0)
    assert not work.ready(1)
    with pytest.raises(ValueError, match="segment 1 cannot denoise before segment 0 was decoded"):
        backend.denoise_clip_segment(work, 1)
    first = list(backend.decode_clip_segment(work, 0, lat0))
    assert work.ready(1) and len(first) == seg
    assert encoder_calls.calls["vae.encode"] == 1  # the seam's one encode (none for the last segment)
    list(backend.decode_clip_segment(work, 1, backend.denoise_clip_segment(work, 1)))
    assert encoder_calls.calls["vae.encode"] == 1

    vae = backend.components.vae
    decoded = wan_decode.decode_video(vae, lat0)  # [1, 3, seg, H, W] in [-1, 1]
    assert np.array_equal(wan_decode.to_frames(decoded), np.stack(first))  # the frames emitted are these
    tail = decoded[:, :, -prev_frames:]
    video = torch.cat([tail, torch.zeros(1, 3, seg - prev_frames, SPEC.height, SPEC.width)], dim=2)
    t_lat, h, w = work.plan.latent_frames, SPEC.height // 8, SPEC.width // 8
    expected = torch.cat([encoders.i2v_mask(t_lat, h, w, prev_frames), encoders.vae_encode(vae, video, "cpu")], dim=1)
    cond = seen[1].reference_latents[:, :, 1:]  # after the reference image's latent frame
    assert torch.equal(cond, expected)
    # The mask: latent frame 0 (pixel frame 0) known; with 5 frames also latent frame 1 (pixels 1-4).
    known = cond[0, :4].amax(dim=(0, 2, 3))
    assert known.tolist() == [1.0] * ((prev_frames - 1) // 4 + 1) + [0.0] * (t_lat - (prev_frames - 1) // 4 - 1)
    # The first segment read the cached all-zero conditioning, nothing known.
    assert torch.equal(seen[0].reference_latents[:, :, 1:], work.guidance.cond0_latents)


def test_latent_continuation_is_there_when_asked_for(pair, monkeypatch, encoder_calls):
    """``continuation="latent"`` (not as trained): segment 2 reads segment 1's last denoised latent
    frames where the encoded frames would go, ready as soon as segment 1 denoised, no VAE encode
    for it; describe() says which continuation a render used."""

    loop, persona = pair
    backend = _backend(continuation="latent")
    _prepare(backend, loop, persona)
    seen = _spy_inputs(monkeypatch)
    work = backend.plan_clip(loop, persona, loop.keypoints, SPEC)
    encoder_calls.calls.update({k: 0 for k in encoder_calls.calls})
    lat0 = backend.denoise_clip_segment(work, 0)
    assert work.ready(1)  # no decode needed
    backend.denoise_clip_segment(work, 1)
    assert encoder_calls.calls["vae.encode"] == 0
    expected = continuation.latent_continuation(work.guidance.cond0_latents, lat0[:, :, 1:], 1)
    assert torch.equal(seen[1].reference_latents[:, :, 1:], expected)
    assert torch.equal(expected[:, 4:, :1], lat0[:, :, -1:])  # the last latent frame, where frame 0's encoding goes
    assert "not as trained" in backend.describe()["continuation"]
    assert _backend().describe()["continuation"].startswith("frames:")
    with pytest.raises(WanAnimateConfigError, match="continuation='pixels': use one of frames, latent"):
        _backend(continuation="pixels")


# ---------------------------------------------------------------------- face crops, CLIP input


def test_face_box_is_wans_crop_rule():
    """Hand-computed: a 100 x 100 landmark box grows to 1.3x its area (each side x sqrt(1.3)):
    7.0 px left and right, 10.5 px above (three quarters of the extra height) and 3.5 below;
    clipped to the frame; truncated to whole pixels."""
    from newsmotion_engine.render.backends.wan_animate.backend import face_box

    pts = np.array([[100.0, 300.0], [200.0, 400.0], [150.0, 350.0]])
    assert face_box(pts, 1000, 1000) == (92, 207, 289, 403)
    x0, x1, y0, y1 = face_box(pts, 1000, 1000)
    assert 1.29 < (x1 - x0) * (y1 - y0) / 100**2 < 1.33
    assert face_box(np.array([[0.0, 0.0], [50.0, 20.0]]), 52, 30) == (0, 52, 0, 20)  # clipped at the edges
    assert face_box(np.array([[5.0, 5.0], [5.0, 9.0]]), 64, 64) is None  # no area


def test_face_video_is_a_per_frame_crop_around_the_face_landmarks(pair):
    """Each face frame is the warp frame's :func:`face_box` around that frame's 68 retargeted face
    landmarks, resized to the motion encoder's size (bilinear, as Wan); the box follows the face
    frame by frame; a frame without a face takes the nearest frame's box."""
    import cv2

    from newsmotion_engine.render.backends.wan_animate.backend import face_box
    from newsmotion_engine.render.placement import place_portrait
    from newsmotion_engine.skeleton import FACE_START

    loop, persona = pair
    kp = np.array(loop.keypoints, np.float64)
    kp[:, FACE_START : FACE_START + 68, 1] += np.linspace(0, 0.1, len(kp))[:, None]  # the face moves down
    kp[0, FACE_START : FACE_START + 68, 2] = 0  # no face in frame 0
    spec = RenderSpec(width=128, height=128)
    rng = np.random.default_rng(0)
    warp_frames = rng.integers(0, 256, (len(kp), spec.height, spec.width, 3), dtype=np.uint8)

    class Warp:
        def frames(self, guidance, persona, keypoints, spec):
            yield from warp_frames

    backend = _backend()
    backend.load()
    backend._warp = Warp()
    faces = backend.face_video(loop, persona, kp, spec)
    size = backend.components.transformer.config.motion_encoder_size
    assert faces.shape == (len(kp), size, size, 3) and faces.dtype == np.uint8
    ox, oy, pw, ph = place_portrait(persona.portrait.shape[:2], spec.width, spec.height)
    face = kp[:, FACE_START : FACE_START + 68]
    boxes = [face_box(np.stack([ox + f[:, 0] * pw, oy + f[:, 1] * ph], axis=-1), spec.width, spec.height) for f in face]
    boxes[0] = boxes[1]
    assert len(set(boxes)) > len(kp) // 2  # per frame, not one box per clip
    for t, (x0, x1, y0, y1) in enumerate(boxes):
        expected = cv2.resize(np.ascontiguousarray(warp_frames[t, y0:y1, x0:x1]), (size, size), interpolation=cv2.INTER_LINEAR)
        assert np.array_equal(faces[t], expected), t


def test_clip_sees_the_whole_reference_frame_stretched_as_wan_does():
    """The CLIP input is the whole frame resized to 224 x 224 (bicubic) with CLIP's mean / std, as
    Wan's ``CLIPModel.visual`` preprocesses it: the top of a portrait frame (the head) reaches the
    tokens, which a resize-and-centre-crop would cut off."""
    from transformers import CLIPVisionConfig, CLIPVisionModel


    seen = []

    class Encoder:
        dtype = torch.float32

        def __call__(self, pixel_values, output_hidden_states):
            seen.append(pixel_values)
            return type("Out", (), {"hidden_states": [pixel_values.flatten(2)[:, :, :5]] * 2})()

    frame = np.random.default_rng(0).integers(0, 256, (128, 64, 3), dtype=np.uint8)  # portrait, 1:2
    encoders.encode_image_tokens(Encoder(), frame, "cpu")
    x = torch.from_numpy(frame).float().permute(2, 0, 1)[None] / 127.5 - 1
    x = torch.nn.functional.interpolate(x, size=(224, 224), mode="bicubic", align_corners=False) * 0.5 + 0.5
    mean = torch.tensor([0.48145466, 0.4578275, 0.40821073]).view(1, 3, 1, 1)
    std = torch.tensor([0.26862954, 0.26130258, 0.27577711]).view(1, 3, 1, 1)
    assert seen[0].shape == (1, 3, 224, 224) and torch.allclose(seen[0], (x - mean) / std, atol=1e-5)

    torch.manual_seed(0)
    enc = CLIPVisionModel(CLIPVisionConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
                                           image_size=224, patch_size=14)).eval()  # fmt: skip
    head = frame.copy()
    head[:16] = 255 - head[:16]  # only the top eighth changes
    a, b = encoders.encode_image_tokens(enc, frame, "cpu"), encoders.encode_image_tokens(enc, head, "cpu")
    assert a.shape == (1, 257, 16) and not torch.allclose(a, b)


# ---------------------------------------------------------------------- streaming decode and the prepare stage


def _latents(latent_frames, seed=0):
    """Random denoised latents of ``latent_frames`` frames, reference frame first."""
    g = torch.Generator("cpu").manual_seed(seed)
    return torch.randn(1, 16, latent_frames + 1, SPEC.height // 8, SPEC.width // 8, generator=g)


@pytest.mark.parametrize("latent_frames", [1, 2, 3, 5])
def test_streamed_decode_is_the_whole_decode_bit_for_bit(latent_frames):
    """``stream_decode`` repeats diffusers' ``AutoencoderKLWan._decode`` latent frame by latent
    frame with its own feature cache: the decoded video (before rounding) and the uint8 frames are
    exactly ``vae.decode``'s, whatever the lookahead; the VAE's own caches are left alone. This
    guards against diffusers changing its decode."""
    from newsmotion_engine.render.backends.wan import decode as wan_decode

    backend = _backend()
    backend.load()
    vae = backend.components.vae
    lat = _latents(latent_frames, latent_frames)
    whole = wan_decode.decode_video(vae, lat)
    assert wan_decode.streaming_unsupported(vae, lat) is None
    in_use = vae._feat_map = [None] * vae._cached_conv_counts["decoder"]  # someone else's decode, mid-flight
    for lookahead in (1, 2, latent_frames + 1):
        chunks = list(wan_decode.stream_decode(vae, lat, lookahead=lookahead))
        assert [c.video.shape[2] for c in chunks] == [1] + [4] * (latent_frames - 1)
        assert [c.last for c in chunks] == [False] * (latent_frames - 1) + [True]
        assert torch.equal(torch.cat([c.video for c in chunks], dim=2), whole)
        assert np.array_equal(np.concatenate([c.frames for c in chunks]), wan_decode.to_frames(whole))
        assert all(c.decode_s > 0 for c in chunks)
    assert vae._feat_map is in_use and all(f is None for f in in_use)
    assert torch.is_grad_enabled()  # no grad mode leaks out of the generator
    backend.close()


def test_streamed_decode_falls_back_to_the_whole_decode_and_says_why(monkeypatch, caplog):
    """A VAE the stream cannot follow (tiling on, decode wrapped on the instance, attributes
    missing) is decoded whole, as one chunk, with the reason logged once."""
    import logging
    import types

    from newsmotion_engine.render.backends.wan import decode as wan_decode

    monkeypatch.setattr(wan_decode, "_warned", set())
    backend = _backend()
    backend.load()
    vae = backend.components.vae
    lat = _latents(3)
    whole = wan_decode.decode_video(vae, lat)
    assert "lacks post_quant_conv, decoder, _cached_conv_counts" in wan_decode.streaming_unsupported(types.SimpleNamespace(config=None, dtype=None), lat)
    vae.enable_tiling()
    try:
        assert wan_decode.streaming_unsupported(vae, lat) == "VAE tiling is on (tiled decode)"
        with caplog.at_level(logging.WARNING, logger=wan_decode.__name__):
            chunks = list(wan_decode.stream_decode(vae, lat))
            list(wan_decode.stream_decode(vae, lat))
    finally:
        vae.disable_tiling()
    assert len(chunks) == 1 and chunks[0].last and torch.equal(chunks[0].video, whole)
    assert np.array_equal(chunks[0].frames, wan_decode.to_frames(whole))
    assert [r.getMessage() for r in caplog.records if r.name == wan_decode.__name__] == ["decoding each Wan segment whole, not streamed: VAE tiling is on (tiled decode)"]
    monkeypatch.setattr(vae, "decode", lambda *a, **k: type(vae).decode(vae, *a, **k))
    assert "replaced on the instance" in wan_decode.streaming_unsupported(vae, lat)
    backend.close()


class _RecordingSink:
    """A ``render_clip`` sink that keeps the frames."""

    def __init__(self, path, width, height, fps, **_):
        self.frames, self.encoder, self.mux_ms, self.wait_ms = [], "none (test)", 0.0, 0.0

    def write(self, frame):
        self.frames.append(frame.copy())

    def __enter__(self):
        _RecordingSink.last = self
        return self

    def __exit__(self, *exc):
        return False


@pytest.mark.parametrize("options, frames, keyframes", [({}, 13, 1), ({"segment_frames": 13, "prev_frames": 5}, 21, 1), ({}, 40, 3)])
def test_streaming_decode_changes_no_frame_of_a_render(pair, monkeypatch, tmp_path, options, frames, keyframes):
    """Whole renders through ``render_clip`` (two segments continuing the trained way; prev 1 and
    5, where the tail spans two decoded chunks; sparse keyframes with the infill consuming the
    frames as they come): the same frames and the same seam conditioning with the decode
    streamed as with each segment decoded whole (the fallback, forced here)."""
    from newsmotion_engine.render.backends.wan import decode as wan_decode

    loop, persona = pair
    clip = _clip_loop(loop, frames)
    spec = RenderSpec(width=64, height=64, keyframes=keyframes)
    seams, real = [], continuation.frames_continuation
    monkeypatch.setattr(continuation, "frames_continuation", lambda *a: seams.append(real(*a)) or seams[-1])
    backend = _backend(**options)
    _prepare(backend, clip, persona, spec)

    def render(name):
        seams.clear()
        render_clip(clip, persona, backend, spec, tmp_path / f"{name}.mp4", sink=_RecordingSink)
        return np.stack(_RecordingSink.last.frames), list(seams), dict(backend.last_render)

    streamed, streamed_seams, stats = render("streamed")
    monkeypatch.setattr(wan_decode, "streaming_unsupported", lambda vae, latents: "forced by the test")
    whole, whole_seams, _ = render("whole")
    assert stats["segments"] == 2 and len(streamed_seams) == 1 and streamed.shape == (frames, 64, 64, 3)
    assert np.array_equal(streamed, whole)
    assert torch.equal(streamed_seams[0], whole_seams[0])
    assert stats["decode_s"] > 0 and stats["face_video_s"] > 0 and stats["pose_encode_s"] > 0
    backend.close()


def test_face_video_is_built_beside_the_pose_encode_and_its_error_propagates(pair, monkeypatch):
    """plan_clip builds the face video on a worker thread while the pose video is encoded (the
    face video here waits for the encode to start: run one after the other, it would time out);
    an error there is raised by plan_clip with its own message."""
    import threading

    from newsmotion_engine.render.backends.wan_animate import caches as C

    loop, persona = pair
    backend = _backend()
    _prepare(backend, loop, persona)
    encoding, real_encode, real_face = threading.Event(), C.encode_pose_latents, backend.face_video

    def encode(*a, **k):
        encoding.set()
        return real_encode(*a, **k)

    def face_video(*a):
        assert encoding.wait(30), "the face video was not built beside the pose encode"
        return real_face(*a)

    monkeypatch.setattr(C, "encode_pose_latents", encode)
    monkeypatch.setattr(backend, "face_video", face_video)
    work = backend.plan_clip(loop, persona, loop.keypoints, SPEC)
    assert work.faces.shape[0] == 13 and work.stats["face_video_s"] > 0 and work.stats["pose_encode_s"] > 0

    def broken(*a):
        raise RuntimeError("warp frame 3: portrait too small")

    monkeypatch.setattr(backend, "face_video", broken)
    with pytest.raises(RuntimeError, match=r"^warp frame 3: portrait too small$"):
        backend.plan_clip(loop, persona, loop.keypoints, SPEC)
    backend.close()
