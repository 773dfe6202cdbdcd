"""wan-animate backend on the tiny preset (CPU, random weights): end to end through render_clip,
the two-tier caches (built by prepare_*, only loaded by frames: no encoder at render time), and
bad input. ``pair`` and ``encoder_calls`` come from this folder's conftest."""

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
from newsmotion_engine.render import wan_animate  # noqa: E402
from newsmotion_engine.render.wan_animate.config import WanAnimateConfigError  # noqa: E402

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
    meta = json.loads((loop.path / "wan-animate" / "64x64" / "metadata.json").read_text())
    assert meta["weights"] == "random weights" and meta["params"]["size"] == [64, 64]
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


def test_no_encoder_runs_at_render_time(pair, encoder_calls):
    loop, persona = pair
    backend = _backend()
    backend.load()
    assert _prepare(backend, loop, persona) == (True, True)
    built = dict(encoder_calls.calls)
    assert built["vae.encode"] > 0 and built["image_encoder"] == 1 and built["text_encoder"] == 1
    encoder_calls.calls.update({k: 0 for k in encoder_calls.calls})
    assert _prepare(backend, loop, persona) == (False, False)  # current: validated, not rebuilt
    frames = list(backend.frames(loop, persona, loop.keypoints, SPEC))
    assert len(frames) == 13 and frames[0].shape == (64, 64, 3) and frames[0].dtype == np.uint8
    assert encoder_calls.calls == {"vae.encode": 0, "image_encoder": 0, "text_encoder": 0}
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
    from newsmotion_engine.render.wan_animate import backend as backend_mod
    from newsmotion_engine.render.wan_animate import denoise

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
    bench/results/gpu_vae_decode_14b_h200.json); on the CPU the default leaves them as they are.
    Forced on the CPU, the decode is the same up to float32 rounding."""
    import torch

    from newsmotion_engine.render.wan_animate.components import build_vae, channels_last_convs
    from newsmotion_engine.render.wan_animate_2 import denoise as D
    from newsmotion_engine.render.wan_animate_2.config import WanAnimate2Options

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
