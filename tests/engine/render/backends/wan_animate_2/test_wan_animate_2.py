"""wan-animate-2 backend on the tiny preset (CPU, random weights): parity with the stock modular
pipelines, the two tiers (encoders counted: none at render time), the three reference-K/V
sources, and bad input. ``pair`` and ``encoder_calls`` come from this folder's conftest."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("diffusers")

from newsmotion_engine.errors import BadInputError  # noqa: E402
from newsmotion_engine.render import RenderSpec, get_backend, render_clip  # noqa: E402
from newsmotion_engine.render.base import BackendCacheMissingError, BackendCacheStaleError, InvalidSpecError  # noqa: E402
from newsmotion_engine.render.backends.wan_animate_2.config import WanAnimate2ConfigError  # noqa: E402
from newsmotion_engine.render.backends.wan import artifacts  # noqa: E402


SPEC = RenderSpec(width=64, height=128)


def _backend(**kw):
    return get_backend("wan-animate-2", **{"preset": "tiny", "device": "cpu", "dtype": "float32", "steps": 2, **kw})


def _render(backend, loop, persona, spec=SPEC):
    return np.stack(list(backend.frames(loop, persona, loop.keypoints, spec)))


def _model_frames(loop) -> int:
    """The loop's frame count at the model's 24 fps (13 frames at 30 fps -> 10)."""
    from newsmotion_engine.guidance.driver import model_frame_count

    return model_frame_count(loop.frames, loop.fps)


def _render_model_rate(backend, loop, persona, spec=SPEC):
    """Our frames as generated, at 24 fps, before the re-timing and the green screen (what the
    stock pipeline outputs)."""
    from newsmotion_engine.guidance.driver import resample_loop

    return np.stack(list(backend._frames(loop, persona, resample_loop(loop.keypoints, _model_frames(loop)), spec)))


def _stock_frames(backend, loop, persona, spec, *, schedule, steps, seed):
    """The stock modular pipeline on the backend's own transformer/VAE (and the same seeded
    encoders), fed the same driving frames (the loop's real 24 fps driving clip — the warp render
    of the driver portrait — continued cyclically to whole segments, so the stock zigzag padding
    adds nothing), the same prompt (the persona's caption) and the same reference frame."""
    import PIL.Image
    from diffusers.modular_pipelines import WanAnimate2Blocks, WanAnimate2DistilledBlocks

    from newsmotion_engine.render.backends.wan_animate_2.components import load_image_encoder, load_text_encoder

    o, comps = backend.options, backend.components
    plan = backend.plan(_model_frames(loop))
    driving = [f for k in range(plan.segments) for f in backend._driving_frames(loop, spec, plan, k)[0 if k == 0 else 1 :]]
    ref = artifacts.reference_frame(persona, spec.width, spec.height, spec.background)
    tok, te = load_text_encoder(o, comps.device)
    blocks = WanAnimate2DistilledBlocks() if schedule == "distilled" else WanAnimate2Blocks()
    pipe = blocks.init_pipeline()
    pipe.update_components(transformer=comps.transformer, vae=comps.vae, image_encoder=load_image_encoder(o, comps.device),
                           text_encoder=te, tokenizer=tok, scheduler=comps.new_scheduler())  # fmt: skip
    prompt = backend.persona_params(persona, spec)[1]["prompt"]
    out = pipe(prompt=prompt, negative_prompt=o.negative_prompt, image=PIL.Image.fromarray(ref),
               driving_video=[PIL.Image.fromarray(f) for f in driving], height=spec.height, width=spec.width,
               segment_frame_length=plan.segment_frames, num_inference_steps=steps,
               generator=torch.Generator().manual_seed(seed), output_type="np")  # fmt: skip
    return np.asarray(out.get("videos")[0])[: _model_frames(loop)]


@pytest.mark.parametrize("schedule", ["distilled", "base"])
def test_parity_with_the_stock_modular_pipeline(pair, schedule):
    """Same weights, inputs, seed and steps (2), both segments, frames continuation (the stock
    way): our uint8 frames equal the stock pipeline's float frames to within 0.6/255 everywhere.
    Measured (2026-12-01, CPU, float32): max 0.5/255, mean 0.25/255 on both schedules, i.e. only
    our rounding to uint8 of the same float values; the margin covers a rounding flip."""
    loop, persona = pair
    backend = _backend(schedule=schedule, continuation="frames")
    backend.prepare_guidance(loop, SPEC)
    backend.prepare_persona(persona, SPEC)
    ours = _render_model_rate(backend, loop, persona).astype(np.float32) / 255.0
    stock = _stock_frames(backend, loop, persona, SPEC, schedule=schedule, steps=2, seed=SPEC.seed)
    assert ours.shape == stock.shape == (_model_frames(loop), SPEC.height, SPEC.width, 3)
    assert float(np.abs(ours - stock).max()) <= 0.6 / 255
    assert backend.last_render["uncond_passes"] == (4 if schedule == "base" else 0)  # 2 segments x 2 steps


def test_fit_segments_render_the_stock_pipeline_at_the_fitted_length(pair):
    """fit_segments (off by default) shortens each segment to the least 4k+1 covering the clip in
    as many segments: the 13-frame loop at segment_frames=17 denoises one 13-frame segment, not
    17 frames with 4 thrown away. The result is the stock pipeline at segment_frame_length=13 (the
    same tolerance as the parity test): a setting the stock pipeline has, not a new approximation."""
    loop, persona = pair
    assert _backend(segment_frames=17).plan(loop.frames).as_dict() == {"frames": 13, "segment_frames": 17, "prev_frames": 1, "segments": 1}
    backend = _backend(segment_frames=17, fit_segments=True, continuation="frames")
    assert backend.plan(loop.frames).as_dict() == {"frames": 13, "segment_frames": 13, "prev_frames": 1, "segments": 1}
    assert _backend(segment_frames=81, fit_segments=True).plan(120).as_dict() == {"frames": 120, "segment_frames": 61, "prev_frames": 1, "segments": 2}
    backend.prepare_guidance(loop, SPEC)
    backend.prepare_persona(persona, SPEC)
    ours = _render_model_rate(backend, loop, persona).astype(np.float32) / 255.0
    stock = _stock_frames(backend, loop, persona, SPEC, schedule="distilled", steps=2, seed=SPEC.seed)
    assert ours.shape == stock.shape == (_model_frames(loop), SPEC.height, SPEC.width, 3)
    assert float(np.abs(ours - stock).max()) <= 0.6 / 255
    assert backend.describe()["fit_segments"] is True
    with pytest.raises(WanAnimate2ConfigError, match="fit_segments"):
        _backend(fit_segments="yes")


def test_renders_only_load_the_tiers_no_encoder_runs(pair, encoder_calls):
    """prepare_* run the VAE encoder, CLIP and the text encoder; a render runs no CLIP or text
    encoder, and the VAE encoder only once per seam (the default frames continuation, as trained);
    latent continuation (opt-in) runs none. The Tier-1 arrays are memory-mapped."""
    loop, persona = pair
    backend = _backend()
    assert backend.prepare_guidance(loop, SPEC) and backend.prepare_persona(persona, SPEC)
    built = dict(encoder_calls.calls)
    assert built["vae.encode"] == 2 + 1 + 1  # two driving segments, the zero video, the reference image
    assert built["image_encoder"] == 2 and built["text_encoder"] == 3  # driving frame + reference; prompt, negative, prompt_ref
    g = backend.load_guidance(loop, SPEC)
    assert isinstance(g.driving_condition, np.memmap) and g.driving_condition.shape == (2, 20, 3, 16, 8)
    frames = _render(backend, loop, persona)
    after = dict(encoder_calls.calls)
    assert after.pop("vae.encode") == built["vae.encode"] + 1  # the one seam of two segments
    assert after == {k: v for k, v in built.items() if k != "vae.encode"}
    assert frames.shape == (13, 128, 64, 3) and frames.dtype == np.uint8 and frames.std() > 0
    latent = _backend(continuation="latent")
    before = dict(encoder_calls.calls)
    assert latent.describe()["continuation"].startswith("latent:")
    _render(latent, loop, persona)
    assert encoder_calls.calls == before  # latent continuation: zero encoder calls at render time
    assert [k["source"] for k in backend.last_render["kv"]] == ["extract", "extract"]
    # The timeline: each segment denoised, then decoded, then handed out, in that order, in time.
    timeline = backend.last_render["timeline"]
    events = ["denoise_start", "denoise_end", "first_chunk_decoded", "frames_handed_out"]
    assert [(e["segment"], e["event"]) for e in timeline] == [(k, e) for k in (0, 1) for e in events]
    assert [e["t"] for e in timeline] == sorted(e["t"] for e in timeline)
    assert not backend.prepare_guidance(loop, SPEC) and not backend.prepare_persona(persona, SPEC)  # current: reused


def test_frames_without_prepare_name_what_to_build_and_other_resolutions_are_refused(pair, monkeypatch):
    loop, persona = pair
    backend = _backend()
    with pytest.raises(BackendCacheMissingError, match=r"backend_guidance_cache\[nod\]"):
        next(backend.frames(loop, persona, loop.keypoints, SPEC))
    backend.prepare_guidance(loop, SPEC)
    backend.prepare_persona(persona, SPEC)
    other = RenderSpec(width=64, height=64)
    with pytest.raises(BackendCacheMissingError, match="64x64"):
        next(backend.frames(loop, persona, loop.keypoints, other))
    # A Tier-1 cache copied in from another resolution: its params say so -> stale, rebuilt by prepare.
    import shutil

    from newsmotion_engine.render.backends.wan_animate_2 import caches as C

    src = C.guidance_artifacts_dir(loop.path, 64, 128)
    dst = C.guidance_artifacts_dir(loop.path, 64, 64)
    shutil.copytree(src, dst)
    with pytest.raises(BackendCacheStaleError, match="wan-animate-2"):
        backend.load_guidance(loop, other)
    with pytest.raises(InvalidSpecError, match="divisible by 16"):
        next(backend.frames(loop, persona, loop.keypoints, RenderSpec(width=72, height=128)))


def test_reference_kv_sources_agree_and_report_bytes(pair):
    """extract and gpu-lru give identical frames (the LRU hit reuses the extracted K/V); the
    FP8 file gives the frames of FP8-quantized extracted K/V exactly (same quantizer); the
    measured bytes equal the analytic formula."""
    from newsmotion_engine.render.backends.wan_animate_2.kv import analytic_kv_bytes

    loop, persona = pair
    base = _backend()
    base.prepare_guidance(loop, SPEC)
    base.prepare_persona(persona, SPEC)
    ref = _render(base, loop, persona)
    lru = _backend(reference_kv="gpu-lru")
    first = _render(lru, loop, persona)
    second = _render(lru, loop, persona)
    assert np.array_equal(ref, first) and np.array_equal(ref, second)
    assert [k["source"] for k in lru.last_render["kv"]] == ["lru-hit", "lru-hit"]
    assert lru.last_render["kv_lru"]["entries"] == 2
    fp8_extract = _render(_backend(kv_fp8=True), loop, persona)
    offloaded = _backend(kv_offload=True)
    assert np.array_equal(_render(offloaded, loop, persona), fp8_extract)  # the same FP8 values, read from the host
    assert offloaded.describe()["kv_offload"] is True
    filed = _backend(reference_kv="fp8-file")
    with pytest.raises(BackendCacheMissingError):  # the K/V file is built by prepare_guidance, not by a render
        _render(filed, loop, persona)
    assert filed.prepare_guidance(loop, SPEC)
    from_file = _render(filed, loop, persona)
    assert np.array_equal(from_file, fp8_extract)
    assert [k["source"] for k in filed.last_render["kv"]] == ["fp8-file", "fp8-file"]
    cfg = base.components.transformer.config
    bf = analytic_kv_bytes(num_layers=cfg.num_layers, dim=cfg.dim, heads=cfg.num_heads, frames=9, width=64, height=128, bytes_per_value=4)
    f8 = analytic_kv_bytes(num_layers=cfg.num_layers, dim=cfg.dim, heads=cfg.num_heads, frames=9, width=64, height=128, bytes_per_value=1)
    assert base.last_render["kv"][0]["bytes"] == bf["bytes"]  # float32 on the CPU test
    assert filed.last_render["kv"][0]["bytes"] == f8["bytes"]


def test_render_clip_end_to_end_and_describe_says_random_weights(pair, tmp_path):
    loop, persona = pair
    backend = _backend()
    backend.prepare_guidance(loop, SPEC)
    backend.prepare_persona(persona, SPEC)
    tele = render_clip(loop, persona, backend, SPEC, tmp_path / "out.mp4")
    assert (tmp_path / "out.mp4").is_file() and tele.frames == 13
    assert backend.describe()["weights"] == "random weights" and "random weights" in backend.describe()["note"]


def test_the_re_timing_runs_in_the_consumers_thread(pair, monkeypatch):
    """The denoise runs on the read-ahead's worker thread; the 24 fps -> loop-rate blending runs
    in the consumer's, so a segment's blended frames do not hold back the next segment's start."""
    import threading

    from newsmotion_engine.render.backends.wan import retime as module
    from newsmotion_engine.render.backends.wan_animate_2 import segment

    loop, persona = pair
    backend = _backend()
    backend.prepare_guidance(loop, SPEC)
    backend.prepare_persona(persona, SPEC)
    threads: dict[str, set[int]] = {"denoise": set(), "retime": set()}
    retime = module.retime_frames

    def recording_retime(frames, n, T):
        for frame in retime(frames, n, T):
            threads["retime"].add(threading.get_ident())
            yield frame

    real_denoise = segment.denoise_from_caches

    def recording_denoise(*args, **kwargs):
        threads["denoise"].add(threading.get_ident())
        return real_denoise(*args, **kwargs)

    monkeypatch.setattr(module, "retime_frames", recording_retime)
    monkeypatch.setattr(segment, "denoise_from_caches", recording_denoise)
    frames = _render(backend, loop, persona)
    assert frames.shape[0] == loop.frames
    assert threads["retime"] == {threading.get_ident()}
    assert threads["denoise"] and threading.get_ident() not in threads["denoise"]


def test_teacache_on_the_base_schedule_skips_denoising_calls_never_the_reference_pass(pair):
    """threshold 0 (a recording run) computes every call (frames equal to no TeaCache, bit for bit); a threshold past
    every change skips every call after the warm-up, per context (cond and uncond apart) and per
    segment (state reset), while each segment's extract pass still runs and fills the K/V."""
    loop, persona = pair
    runs = {}
    for name, extra in (("off", {}), ("zero", {"teacache_record": True}), ("all", {"teacache": 10.0, "teacache_warmup": 1})):
        backend = _backend(schedule="base", steps=4, **extra)
        backend.prepare_guidance(loop, SPEC)
        backend.prepare_persona(persona, SPEC)
        runs[name] = (_render(backend, loop, persona), backend.last_render)
    (off, _), (zero, zero_stats), (skip, skip_stats) = runs["off"], runs["zero"], runs["all"]
    assert np.array_equal(off, zero) and (zero_stats["teacache_computed"], zero_stats["teacache_skipped"]) == (16, 0)
    # 2 segments x 2 contexts: the first call of each computes, the other 3 steps are skipped.
    assert (skip_stats["teacache_computed"], skip_stats["teacache_skipped"]) == (4, 12)
    assert [e["source"] for e in skip_stats["kv"]] == ["extract", "extract"] and skip.shape == off.shape
    assert not np.array_equal(skip, off)


def test_options_refuse_what_does_not_apply():
    from newsmotion_engine.accel.teacache import TeaCache

    with pytest.raises(WanAnimate2ConfigError, match="distilled schedule samples without CFG"):
        _backend(guidance_scale=3.0)
    with pytest.raises(WanAnimate2ConfigError, match="needs the base schedule"):
        _backend(cfg_every=2)
    _backend(schedule="base", cfg_every=2)  # applies on the base schedule
    with pytest.raises(WanAnimate2ConfigError, match="TeaCache needs the base schedule"):
        _backend(accelerations=(TeaCache(threshold=0.1),))
    _backend(schedule="base", teacache=0.1)  # applies on the base schedule
    with pytest.raises(WanAnimate2ConfigError, match="flex attention"):
        _backend(attention="cudnn")
    with pytest.raises(WanAnimate2ConfigError, match="reference_kv"):
        _backend(reference_kv="disk")
    with pytest.raises(WanAnimate2ConfigError, match="unknown wan-animate-2 option"):
        _backend(face_size=3)
    b = _backend(schedule="base")
    assert (b.options.num_steps, b.options.cfg_scale) == (2, 3.0)
    d = get_backend("wan-animate-2", schedule="distilled").options
    assert (d.num_steps, d.cfg_scale, get_backend("wan-animate-2", schedule="base").options.num_steps) == (10, 1.0, 40)


def test_model_folder_errors_name_the_problem(tmp_path):
    with pytest.raises(BadInputError, match="does not exist"):
        _backend(model_path=str(tmp_path / "nope")).load()
    root = tmp_path / "model"
    for sub in ("transformer", "vae", "scheduler", "image_encoder", "text_encoder", "tokenizer"):
        (root / sub).mkdir(parents=True)
    with pytest.raises(BadInputError, match="model_index.json"):
        _backend(model_path=str(root)).load()
    (root / "model_index.json").write_text('{"_class_name": "WanAnimatePipeline"}')
    for sub, name in (("transformer", "config.json"), ("vae", "config.json"), ("scheduler", "scheduler_config.json"),
                      ("image_encoder", "config.json"), ("text_encoder", "config.json"), ("tokenizer", "tokenizer_config.json")):  # fmt: skip
        (root / sub / name).write_text('{"_class_name": "WanAnimateTransformer3DModel"}')
    with pytest.raises(BadInputError, match="no weight file"):
        _backend(model_path=str(root)).load()
    for sub in ("transformer", "vae", "image_encoder", "text_encoder"):
        (root / sub / "model.safetensors").write_bytes(b"x")
    with pytest.raises(BadInputError, match="wrong architecture for wan-animate-2"):
        _backend(model_path=str(root)).load()


def test_cuda_oom_names_the_memory_settings(pair, monkeypatch):
    from newsmotion_engine.render.backends.wan_animate_2 import segment
    from newsmotion_engine.render.backends.wan_animate_2.backend import WanAnimate2OOMError

    loop, persona = pair
    backend = _backend()
    backend.prepare_guidance(loop, SPEC)
    backend.prepare_persona(persona, SPEC)

    class OutOfMemoryError(RuntimeError):
        pass

    def boom(*a, **k):
        raise OutOfMemoryError("CUDA out of memory")

    monkeypatch.setattr(segment.D, "denoise_segment", boom)
    with pytest.raises(WanAnimate2OOMError, match=r"fp8='auto'.*kv_fp8=True.*64x128"):
        _render(backend, loop, persona)


def test_decoding_a_segments_first_frames_equals_the_full_decode_cut():
    """The last segment runs past the clip's end: only its first frames are decoded. The Wan VAE
    decodes causally, so that is exactly the full decode cut short, not an approximation."""
    from newsmotion_engine.render.backends.wan_animate_2 import denoise as D

    backend = _backend()
    backend.load()
    g = torch.Generator().manual_seed(7)
    latents = torch.randn(16, 1 + 4, 16, 8, generator=g)  # reference slot + 4 latents = 13 frames
    with torch.no_grad():
        full = D.decode_segment(backend.components.vae, latents)
        for frames in (1, 2, 5, 6, 13):
            part = D.decode_segment(backend.components.vae, latents, frames)
            assert part.shape[2] >= frames and part.shape[2] == 1 + 4 * ((frames + 2) // 4)
            assert torch.equal(part, full[:, :, : part.shape[2]]), frames
    backend.close()


@pytest.mark.parametrize("continuation", ["frames", "latent"])
def test_a_clip_of_three_segments_gives_each_frame_once(pair, continuation, tmp_path):
    """A clip of 3 segments whose last one runs past the clip's end (only its first frames
    decoded): every frame comes out once, in order, with either continuation."""
    import dataclasses

    nod, persona = pair
    (tmp_path / "long").mkdir()
    # At the model's 24 fps the 19 frames are generated as they are (no re-timing): 3 segments.
    loop = dataclasses.replace(nod, loop_id="nod-19", keypoints=np.concatenate([nod.keypoints, nod.keypoints[:6]]), path=tmp_path / "long", fps=24)
    backend = _backend(continuation=continuation)
    backend.prepare_guidance(loop, SPEC)
    backend.prepare_persona(persona, SPEC)
    frames, stats = _render(backend, loop, persona), backend.last_render
    backend.close()
    assert frames.shape == (19, SPEC.height, SPEC.width, 3) and stats["segments"] == 3
    assert stats["decode_s"] > 0



def test_every_segment_decodes_whole_before_its_first_frame(pair, tmp_path):
    """A segment the next one continues from (``continuation="frames"``) and the clip's last one
    alike: every latent frame the clip needs is decoded (enqueued, on a GPU) before the segment's
    first frame comes out, and the last segment decodes only those. The frames are the whole
    decode's either way (the parity tests)."""
    import dataclasses

    nod, persona = pair
    (tmp_path / "long").mkdir()
    # 25 frames at the model's 24 fps in 13-frame segments (4 latent frames each): segment 0 gives
    # 13, segment 1 the other 12 after the one it continues from.
    loop = dataclasses.replace(nod, loop_id="nod-25", keypoints=np.concatenate([nod.keypoints, nod.keypoints[:12]]),
                               path=tmp_path / "long", fps=24)  # fmt: skip
    backend = _backend(continuation="frames", segment_frames=13)
    backend.prepare_guidance(loop, SPEC)
    backend.prepare_persona(persona, SPEC)
    calls = []
    backend.components.vae.decoder.register_forward_pre_hook(lambda module, args: calls.append(1))
    seen = [len(calls) for _ in backend._frames(loop, persona, loop.keypoints, SPEC)]  # decoder calls made by each frame's hand-out
    backend.close()
    assert backend.last_render["segments"] == 2 and len(seen) == 25
    assert seen[:13] == [4] * 13  # segment 0: all 4 latent frames decoded before its first frame
    assert seen[13:] == [8] * 12 and len(calls) == 8  # segment 1 likewise


@pytest.mark.parametrize("option", ["conv3d_as_2d", "causal_pad_fold", "fused_vae_norm"])
def test_the_vae_convolution_options_render_the_same_frames(pair, tmp_path, option):
    """``conv3d_as_2d`` (accel/conv3d.py) runs the Wan VAE's causal 3-D convolutions as 2-D ones,
    ``causal_pad_fold`` (accel/causal_pad.py) pads them in space inside the convolution,
    ``fused_vae_norm`` (accel/vae_norm.py) takes its norms and SiLUs together: the continuation's
    encode and every decode give the same frames, over three segments."""
    import dataclasses

    nod, persona = pair
    (tmp_path / "long").mkdir()
    loop = dataclasses.replace(nod, loop_id="nod-19", keypoints=np.concatenate([nod.keypoints, nod.keypoints[:6]]), path=tmp_path / "long", fps=24)
    frames = {}
    for on in (False, True):
        backend = _backend(**{option: on}, continuation="frames")
        backend.prepare_guidance(loop, SPEC)
        backend.prepare_persona(persona, SPEC)
        frames[on] = _render(backend, loop, persona).astype(np.int16)
        if on:
            assert backend.accel_report[option]["modules"]["vae"] > 5
        backend.close()
    assert np.abs(frames[True] - frames[False]).max() <= 1
