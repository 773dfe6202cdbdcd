"""mimicmotion backend on the tiny preset (CPU, random weights): end to end through render_clip,
the persona sub-cache (built by prepare_persona, only loaded by frames), the official windows and
fusion weights, the exactness of batched CFG, framing onto the canvas, and bad options. ``pair``
comes from tests/engine/render/conftest.py (a 13-frame loop and a persona as loaded caches)."""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("diffusers")

pytestmark = pytest.mark.usefixtures("one_torch_thread")

from newsmotion_engine.errors import CacheMissingError, CacheStaleError  # noqa: E402
from newsmotion_engine.render import RenderSpec, available_backends, get_backend, render_clip  # noqa: E402
from newsmotion_engine.render.base import BackendCacheMissingError, BackendCacheStaleError, BackendOptionError  # noqa: E402
from newsmotion_engine.render.backends import mimicmotion  # noqa: E402
from newsmotion_engine.render.backends.mimicmotion import denoise as D  # noqa: E402
from newsmotion_engine.render.backends.mimicmotion.backend import frame_onto  # noqa: E402
from newsmotion_engine.render.backends.mimicmotion.config import MimicMotionConfigError, native_size  # noqa: E402

mimicmotion.register()

SPEC = RenderSpec(width=80, height=128)  # the tiny preset's native size: no framing


def _backend(**kw):
    return get_backend("mimicmotion", **{"preset": "tiny", "steps": 2, "device": "cpu", "dtype": "float32", **kw})


@pytest.fixture(scope="module")
def tiny():
    """One loaded tiny backend for the module (loading is the slow part; caches live in each test's folders)."""
    backend = _backend()
    backend.load()
    yield backend
    backend.close()


def test_registered_and_listed():
    assert "mimicmotion" in available_backends()
    from newsmotion_engine.render.backends import BUILT_IN

    assert "mimicmotion" in BUILT_IN


def test_tiny_render_end_to_end_through_render_clip(pair, tmp_path, tiny):
    loop, persona = pair
    backend = tiny
    assert backend.prepare_guidance(loop, SPEC) is False  # no guidance sub-cache: poses are drawn per render
    assert backend.prepare_persona(persona, SPEC) is True
    assert backend.prepare_persona(persona, SPEC) is False  # current: validated, not rebuilt
    tele = render_clip(loop, persona, backend, SPEC, tmp_path / "out.mp4")
    assert tele.frames == 13 and (tmp_path / "out.mp4").stat().st_size > 0
    info = tele.backend_info
    assert info["weights"] == "random weights" and "random weights" in info["note"]
    last = info["last_render"]
    # 14 frames (reference + 13) in 8-frame windows 6 apart: [0,1..7], [0,7..13]; 2 steps, CFG batched.
    assert last["windows"] == 2 and last["unet_calls"] == 4 and last["native"] == [80, 128]
    meta = json.loads((persona.path / "mimicmotion" / "80x128" / "metadata.json").read_text())
    assert meta["weights"] == "random weights" and meta["params"]["native"] == [80, 128]
    assert not (loop.path / "mimicmotion").exists()


def test_frames_need_the_persona_sub_cache_and_build_nothing(pair, tiny):
    loop, persona = pair
    backend = tiny
    with pytest.raises(BackendCacheMissingError, match=r"mimicmotion persona artifacts for persona 'anna' at 80x128 are missing") as info:
        list(backend.frames(loop, persona, loop.keypoints, SPEC))
    assert isinstance(info.value, CacheMissingError) and info.value.asset == "backend_persona_cache"
    assert not (persona.path / "mimicmotion").exists()


def test_stale_persona_cache_is_refused_and_rebuilt(pair, tiny):
    loop, persona = pair
    backend = tiny
    backend.prepare_persona(persona, SPEC)
    persona.metadata = {"source": {"kind": "image", "sha256": "c" * 64}}  # the portrait changed
    with pytest.raises(BackendCacheStaleError) as info:
        list(backend.frames(loop, persona, loop.keypoints, SPEC))
    assert isinstance(info.value, CacheStaleError)
    assert backend.prepare_persona(persona, SPEC) is True
    # Another background is another reference image: stale too.
    assert backend.prepare_persona(persona, RenderSpec(width=80, height=128, background="#0000FF")) is True


def test_same_seed_same_frames_other_seed_other_frames(pair, tiny):
    loop, persona = pair
    kp = loop.keypoints[:5]
    tiny.prepare_persona(persona, SPEC)
    a = np.stack(list(tiny.frames(loop, persona, kp, SPEC)))
    b = np.stack(list(tiny.frames(loop, persona, kp, SPEC)))
    c = np.stack(list(tiny.frames(loop, persona, kp, RenderSpec(width=80, height=128, seed=1))))
    assert a.shape == (5, 128, 80, 3) and np.array_equal(a, b) and not np.array_equal(a, c)


def test_official_windows_and_fusion_weights():
    # The released clip: 120 frames + the reference, 72-frame windows overlapping by 6.
    w = D.window_indices(121, 72, 6)
    assert w == [[0, *range(1, 72)], [0, *range(50, 121)]]
    # A long clip: windows every 66 frames, then one aligned to the end; every window 72 frames.
    w = D.window_indices(301, 72, 6)
    assert [x[1] for x in w] == [1, 67, 133, 199, 230] and all(len(x) == 72 for x in w)
    assert D.window_indices(10, 72, 6) == [list(range(10))]  # shorter than a window: one of its length
    weights = D.window_weights(4)
    assert torch.allclose(weights, torch.tensor([0.25, 0.75, 0.75, 0.25]))


def _inputs(tiny, persona, keypoints, seed=0):
    from newsmotion_engine.render.backends.mimicmotion import caches as C

    p = tiny.load_persona(persona, SPEC)
    pose = torch.cat([p.ref_pose[None], C.to_model_pixels(C.pose_frames(persona, keypoints, 80, 128))])
    noise = torch.randn((1, 8, 4, 16, 10), generator=torch.Generator().manual_seed(seed))
    return D.DenoiseInputs(p.image_embeds, p.image_latents, pose, noise, (6.0, 127.0, 0.0))


def test_batched_cfg_equals_two_passes_and_pose_changes_the_result(pair, tiny):
    loop, persona = pair
    tiny.prepare_persona(persona, SPEC)
    kw = dict(steps=2, guidance_scale=2.0, tile=8, overlap=2)
    kp = loop.keypoints[:9]  # 10 frames: windows [0..7] and [0, 3..9]
    batched = D.denoise(tiny.components, _inputs(tiny, persona, kp), batch_cfg=True, **kw)
    twice = _inputs(tiny, persona, kp)
    separate = D.denoise(tiny.components, twice, batch_cfg=False, **kw)
    assert twice.stats["unet_calls"] == 8 and twice.stats["windows"] == 2
    diff = (batched - separate).abs().max().item()
    assert diff < 1e-3 * batched.abs().max().item(), diff  # float rounding of a batch of two vs two calls
    moved = kp.copy()
    moved[:, :, 0] += 0.1  # another pose -> other latents (the PoseNet path is live)
    other = D.denoise(tiny.components, _inputs(tiny, persona, moved), batch_cfg=True, **kw)
    assert (other - batched).abs().max() > 1e-3


def test_native_size_is_the_official_target_and_frames_are_framed_onto_the_canvas(pair, tiny):
    assert native_size(576, 720, 1280) == (576, 1024) and native_size(576, 1280, 720) == (1024, 576)
    frame = np.zeros((1024, 576, 3), np.uint8)
    frame[:, :, 0] = 200
    out = frame_onto(frame, 720, 1280, (0, 177, 64))
    assert out.shape == (1280, 720, 3) and (out[..., 0] == 200).all()  # 1.25x exactly: no border
    out = frame_onto(frame, 720, 720, (0, 177, 64))
    assert out.shape == (720, 720, 3) and tuple(out[360, 0]) == (0, 177, 64) and out[360, 360, 0] == 200
    loop, persona = pair
    spec = RenderSpec(width=64, height=64)  # another aspect: the 80x128 native frame fits, bordered
    tiny.prepare_persona(persona, spec)
    frames = list(tiny.frames(loop, persona, loop.keypoints[:3], spec))
    assert len(frames) == 3 and frames[0].shape == (64, 64, 3)


def test_bad_options_are_refused_with_the_rule():
    with pytest.raises(MimicMotionConfigError, match="unknown mimicmotion option.*teacache"):
        _backend(teacache=0.1)
    with pytest.raises(BackendOptionError, match="overlap=7: use an integer 0..6"):
        _backend(overlap=7)
    with pytest.raises(BackendOptionError, match="mimicmotion takes no LoRA"):
        _backend(lora="a.safetensors")
    with pytest.raises(BackendOptionError, match="segment_frames"):
        _backend(segment_frames=1)
    opts = mimicmotion.MimicMotionOptions.from_mapping({"compile": "blocks", "fp8": "auto"})
    assert [c.technique for c in opts.accelerations] == ["fp8", "compile"]
    with pytest.raises(MimicMotionConfigError, match="unknown mimicmotion option.*fp8_attention_variant"):
        _backend(attention="fp8-triton", fp8_attention_variant="int8qk-fp8pv")


def _official_latents(comps, p, pose, *, steps, scale, tile, overlap, seed, size):
    """The official MimicMotionPipeline.__call__ loop written out as it is (CFG passes as two calls,
    the PoseNet at every step, the prediction accumulated in the model's dtype, the generator
    drawing the augmentation noise before the latents), on our components."""
    unet, pose_net = comps.unet, comps.pose_net
    sch = comps.new_scheduler()
    sch.set_timesteps(steps)
    F, (w, h) = pose.shape[0], size
    gen = torch.Generator().manual_seed(seed)
    torch.randn((1, 3, h, w), generator=gen)  # image + noise_aug_strength * noise (strength 0)
    latents = torch.randn((1, tile, 4, *p.image_latents.shape[-2:]), generator=gen) * sch.init_noise_sigma
    latents = latents.repeat(1, F // tile + 1, 1, 1, 1)[:, :F]
    emb = torch.cat([torch.zeros_like(p.image_embeds), p.image_embeds])
    image_latents = torch.cat([torch.zeros_like(p.image_latents), p.image_latents])[:, None].repeat(1, F, 1, 1, 1)
    ids = torch.tensor([[6.0, 127.0, 0.0]] * 2)
    indices = [[0, *range(i + 1, min(i + tile, F))] for i in range(0, F - tile + 1, tile - overlap)]
    if indices[-1][-1] < F - 1:
        indices.append([0, *range(F - tile + 1, F)])
    with torch.no_grad():
        for t in sch.timesteps:
            model_in = torch.cat([sch.scale_model_input(torch.cat([latents] * 2), t), image_latents], dim=2)
            pred = torch.zeros_like(image_latents)
            count = image_latents.new_zeros((F,))
            weight = (torch.arange(tile) + 0.5) * 2.0 / tile
            weight = torch.minimum(weight, 2 - weight)
            for idx in indices:
                pose_latents = pose_net(pose[idx])
                out = unet(model_in[:1, idx], t, encoder_hidden_states=emb[:1], added_time_ids=ids[:1], return_dict=False)[0]
                pred[:1, idx] += out * weight[:, None, None, None]
                # The official UNet's one change: sample = conv_in(sample) + pose_latents.
                hook = unet.conv_in.register_forward_hook(lambda m, i, o, pl=pose_latents: o + pl)
                out = unet(model_in[1:, idx], t, encoder_hidden_states=emb[1:], added_time_ids=ids[1:], return_dict=False)[0]
                hook.remove()
                pred[1:, idx] += out * weight[:, None, None, None]
                count[idx] += weight
            pred.div_(count[:, None, None, None])
            uncond, cond = pred.chunk(2)
            latents = sch.step(uncond + scale * (cond - uncond), t, latents, return_dict=False)[0]
    return latents


def test_render_matches_the_official_loop_written_out(pair, tiny, monkeypatch):
    import dataclasses

    from newsmotion_engine.render.backends.mimicmotion import caches as C

    loop, persona = pair
    kp = loop.keypoints[:9]  # 10 frames in two 8-frame windows
    backend = tiny
    monkeypatch.setattr(backend, "options", dataclasses.replace(backend.options, chroma="off"))  # the model's raw frames
    backend.prepare_persona(persona, SPEC)
    ours = np.stack(list(backend.frames(loop, persona, kp, SPEC))).astype(int)
    p = backend.load_persona(persona, SPEC)
    pose = torch.cat([p.ref_pose[None], C.to_model_pixels(C.pose_frames(persona, kp, 80, 128))])
    latents = _official_latents(backend.components, p, pose, steps=2, scale=2.0, tile=8, overlap=2, seed=0, size=(80, 128))
    theirs = np.stack(list(D.decode_frames(backend.components.vae, latents, 8)))[1:].astype(int)  # the reference frame dropped
    assert ours.shape == theirs.shape == (9, 128, 80, 3)
    assert np.abs(ours - theirs).max() <= 1  # float rounding (batched CFG, float32 accumulation)


def test_persona_key_follows_native_size_and_noise_augmentation(pair, tiny):
    _, persona = pair
    source, params = tiny.persona_params(persona, SPEC)
    assert params["native"] == [80, 128] and params["noise_aug_strength"] == 0.0 and "seed" not in params
    noisy = _backend(noise_aug_strength=0.02)
    noisy.components = tiny.components  # same weights: only the key differs
    _, p0 = noisy.persona_params(persona, SPEC)
    _, p1 = noisy.persona_params(persona, RenderSpec(width=80, height=128, seed=1))
    assert p0["seed"] == 0 and p1["seed"] == 1 and p0 != params  # the augmentation noise comes from the render's seed
    hi = _backend(resolution=160)
    hi.components = tiny.components
    assert hi.persona_params(persona, SPEC)[1]["native"] == [160, 256]


def test_compile_applies_to_the_unets_repeated_blocks_and_is_removed(tiny):
    from newsmotion_engine.accel import registry
    from newsmotion_engine.accel.compile import Compile

    applied = registry.apply_accelerations(tiny.components, (Compile(),))
    try:
        # Every spatio-temporal transformer and resnet block (the tiny UNet has 4 and 8).
        assert applied.report["compile"]["blocks"] == sum(
            type(m).__name__ in ("TransformerSpatioTemporalModel", "SpatioTemporalResBlock") for m in tiny.components.unet.modules())
        assert applied.report["compile"]["blocks"] == 12
    finally:
        registry.remove_accelerations(tiny.components, applied)
    assert not any(getattr(m, "_compiled_call_impl", None) for m in tiny.components.unet.modules())


def test_fp8_swaps_the_unets_block_linears_renders_close_frames_and_is_removed(pair, tiny):
    """FP8 linears reach the UNet's down / mid / up blocks (a UNet has no ``blocks``)."""
    from tests.engine.render.backends.fp8_unet import check_fp8_round_trip

    loop, persona = pair
    tiny.prepare_persona(persona, SPEC)
    check_fp8_round_trip(tiny.components, lambda: tiny.frames(loop, persona, loop.keypoints[:5], SPEC))


def test_channels_last_renders_the_same_frames_and_is_removed(pair, tiny):
    """The convolution weights NHWC (the UNet, held as ``transformer``, the VAE and the PoseNet):
    the same arithmetic, so the same frames up to float rounding; removed, the default order again."""
    from newsmotion_engine.accel import registry
    from newsmotion_engine.accel.memory_format import ChannelsLast

    loop, persona = pair
    kp = loop.keypoints[:5]
    tiny.prepare_persona(persona, SPEC)
    before = np.stack(list(tiny.frames(loop, persona, kp, SPEC))).astype(np.int16)
    applied = registry.apply_accelerations(tiny.components, (ChannelsLast(),))
    try:
        assert set(applied.report["channels_last"]["modules"]) == {"transformer", "vae", "pose_net"}
        after = np.stack(list(tiny.frames(loop, persona, kp, SPEC))).astype(np.int16)
    finally:
        registry.remove_accelerations(tiny.components, applied)
    assert np.abs(after - before).max() <= 1, np.abs(after - before).max()  # uint8 rounding of float noise
    assert all(m.weight.is_contiguous() for m in tiny.components.transformer.modules() if isinstance(m, torch.nn.Conv2d))


def test_conv3d_as_2d_renders_the_same_frames_and_is_removed(pair, tiny):
    """The 3-D convolutions of the UNet and the temporal decoder as 2-D ones: the same
    products, so the same frames up to float rounding; removed, the stock forwards again."""
    from newsmotion_engine.accel import registry
    from newsmotion_engine.accel.conv3d import Conv3dAs2d

    loop, persona = pair
    kp = loop.keypoints[:5]
    tiny.prepare_persona(persona, SPEC)
    before = np.stack(list(tiny.frames(loop, persona, kp, SPEC))).astype(np.int16)
    applied = registry.apply_accelerations(tiny.components, (Conv3dAs2d(),))
    try:
        counts = applied.report["conv3d_as_2d"]["modules"]
        assert set(counts) == {"transformer", "vae"} and all(counts.values()), counts
        after = np.stack(list(tiny.frames(loop, persona, kp, SPEC))).astype(np.int16)
    finally:
        registry.remove_accelerations(tiny.components, applied)
    assert np.abs(after - before).max() <= 1, np.abs(after - before).max()  # uint8 rounding of float noise


def test_one_key_cross_renders_the_same_frames_and_is_removed(pair, tiny):
    """Every spatial and temporal ``attn2`` reads the one-token CLIP image embedding, so each is
    its value broadcast: the same frames up to float rounding; removed, the stock processors again."""
    from diffusers.models.attention_processor import Attention as DiffusersAttention

    from newsmotion_engine.accel import registry
    from newsmotion_engine.accel.one_key_cross import OneKeyCross

    loop, persona = pair
    kp = loop.keypoints[:5]
    tiny.prepare_persona(persona, SPEC)
    unet = tiny.components.transformer
    cross = [n for n, m in unet.named_modules() if isinstance(m, DiffusersAttention) and m.is_cross_attention]
    before = np.stack(list(tiny.frames(loop, persona, kp, SPEC))).astype(np.int16)
    applied = registry.apply_accelerations(tiny.components, (OneKeyCross(),))
    try:
        assert applied.report["one_key_cross"]["modules"] == {"transformer": len(cross)} and len(cross) == 8  # 4 spatial + 4 temporal
        after = np.stack(list(tiny.frames(loop, persona, kp, SPEC))).astype(np.int16)
    finally:
        registry.remove_accelerations(tiny.components, applied)
    assert np.abs(after - before).max() <= 1, np.abs(after - before).max()  # uint8 rounding of float noise
    assert all(type(dict(unet.named_modules())[n].processor).__name__ == "AttnProcessor2_0" for n in cross)


def test_fp8_attention_replaces_only_the_spatial_self_attention_and_matches_the_stock_processor(tiny, monkeypatch):
    """``attention=fp8-triton``: the spatial transformer blocks' ``attn1`` get our kernel's
    processor (the temporal blocks and the cross-attention keep theirs), which computes what
    diffusers' ``AttnProcessor2_0`` does with the kernel in place of SDPA (here the kernel is the
    exact SDPA: the CPU has no Hopper tensor cores), falls back for calls it does not take, and
    removal restores the processors."""
    from diffusers.models.attention_processor import Attention as DiffusersAttention
    from diffusers.models.attention_processor import AttnProcessor2_0

    from newsmotion_engine.accel import attention as A
    from newsmotion_engine.accel import registry
    from newsmotion_engine.render.backends.mimicmotion.attention import Fp8SpatialSelfAttnProcessor, spatial_self_attention

    unet = tiny.components.transformer
    monkeypatch.setattr(A, "kernel_supported", lambda kernel: (True, "stub"))
    before = {n: m.processor for n, m in unet.named_modules() if isinstance(m, DiffusersAttention)}
    applied = registry.apply_accelerations(tiny.components, (A.Attention(kernel="fp8-triton"),))
    try:
        replaced = {n for n, m in unet.named_modules() if isinstance(m, DiffusersAttention) and isinstance(m.processor, Fp8SpatialSelfAttnProcessor)}
        assert replaced == {n for n in before if ".transformer_blocks." in n and n.endswith("attn1")} and len(replaced) == 4
        assert applied.report["attention"]["self_attention_layers"] == len(spatial_self_attention(unet)) == 4
    finally:
        registry.remove_accelerations(tiny.components, applied)
    assert all(m.processor is before[n] for n, m in unet.named_modules() if isinstance(m, DiffusersAttention))

    sdpa = torch.nn.functional.scaled_dot_product_attention
    monkeypatch.setattr(A, "fp8_attention", lambda q, k, v, variant=None: sdpa(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)).transpose(1, 2))  # fmt: skip
    torch.manual_seed(0)
    attn = DiffusersAttention(query_dim=128, heads=2, dim_head=64).eval()
    x = torch.randn(3, 40, 128)
    proc = Fp8SpatialSelfAttnProcessor()
    with torch.no_grad():
        torch.testing.assert_close(proc.attend(attn, x), AttnProcessor2_0()(attn, x), rtol=1e-5, atol=1e-5)
    assert not proc.takes(attn, x, None, None)  # a CPU tensor: the stock processor runs
    cuda_like = torch.empty(3, 40, 128, device="meta")
    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda t: True))
    assert proc.takes(attn, cuda_like, None, None)
    assert not proc.takes(attn, cuda_like, torch.empty(3, 1, 128), None)  # cross-attention
    assert not proc.takes(attn, cuda_like, None, torch.empty(1))  # a mask
    assert not proc.takes(DiffusersAttention(query_dim=64, heads=4, dim_head=16), cuda_like[..., :64], None, None)  # head size 16


def test_only_our_attention_kernel_is_offered():
    with pytest.raises(MimicMotionConfigError, match="fp8-triton"):
        _backend(attention="cudnn")
    assert [c.technique for c in _backend(attention="fp8-triton").options.accelerations] == ["attention"]
