"""champ backend on the tiny preset (CPU, random weights) with the synthetic SMPL body: a 2-step
render end to end through the registry and render_clip, the two tiers of sub-caches (built by
prepare_*, only loaded by frames; invalidated by the SMPL file, the loop and the persona), and
the refusal without an SMPL file. ``pair`` comes from tests/engine/render/conftest.py."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("diffusers")

from newsmotion_engine.render import RenderSpec, get_backend, render_clip  # noqa: E402
from newsmotion_engine.render.backends.champ.backend import ChampBackend  # noqa: E402
from newsmotion_engine.render.backends.champ.fit import FitConfig  # noqa: E402
from newsmotion_engine.render.base import BackendCacheMissingError, BackendCacheStaleError, BackendOptionError, available_backends  # noqa: E402
from newsmotion_engine.render.retarget import retarget  # noqa: E402

SPEC = RenderSpec(width=64, height=128)
OPTS = dict(preset="tiny", steps=2, device="cpu", dtype="float32", context_frames=8, context_overlap=2, model_width=64)


@pytest.fixture(autouse=True)
def quick_fit(monkeypatch):
    monkeypatch.setattr(ChampBackend, "fit_config", FitConfig(iterations=20))


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    """One loaded backend for the module (loading the tiny models is most of a test's time)."""
    from newsmotion_engine.render.backends.champ.synthetic_body import write_synthetic_smpl

    smpl = write_synthetic_smpl(tmp_path_factory.mktemp("smpl") / "SMPL_SYNTH.npz")
    backend = get_backend("champ", smpl_model=str(smpl), **OPTS)
    backend.load()
    yield backend
    backend.close()


def _kp(loop, persona):
    return retarget(loop.keypoints, persona.landmarks, persona_size=(persona.portrait.shape[1], persona.portrait.shape[0]))


def _prepared_render(loaded, pair):
    """Both tiers built for ``pair`` at the tests' size; a callable rendering its frames."""
    loop, persona = pair
    spec = RenderSpec(width=64, height=128, seed=3)
    loaded.prepare_guidance(loop, spec)
    loaded.prepare_persona(persona, spec)
    kp = _kp(loop, persona)
    return lambda: loaded.frames(loop, persona, kp, spec)


def test_compile_applies_to_components_loaded_without_it(loaded):
    """The benchmark loads once and applies each variant's accelerations to the loaded components:
    the UNet's repeated blocks must be known whatever the options were at load."""
    from newsmotion_engine.accel import registry
    from newsmotion_engine.accel.compile import Compile, compiled_block_count

    assert not loaded.options.has("compile")
    applied = registry.apply_accelerations(loaded.components, (Compile(),))
    try:
        assert compiled_block_count(loaded.components.transformer) > 0
    finally:
        registry.remove_accelerations(loaded.components, applied)


def test_registered_and_refused_without_an_smpl_file(monkeypatch):
    assert "champ" in available_backends()
    monkeypatch.delenv("NEWSMOTION_SMPL_MODEL", raising=False)
    with pytest.raises(BackendOptionError) as err:
        get_backend("champ", preset="tiny")
    msg = str(err.value)
    assert "\n" not in msg and "SMPL" in msg and "smpl.is.tue.mpg.de" in msg and "-o smpl_model=PATH" in msg


def test_tiny_render_end_to_end_through_render_clip(loaded, pair, tmp_path):
    loop, persona = pair
    assert loaded.prepare_guidance(loop, SPEC) is True and loaded.prepare_persona(persona, SPEC) is True
    assert loaded.prepare_guidance(loop, SPEC) is False and loaded.prepare_persona(persona, SPEC) is False
    out = tmp_path / "clip.mp4"
    tele = render_clip(loop, persona, loaded, SPEC, out)
    assert out.stat().st_size > 0 and tele.frames == loop.frames == 13
    info = tele.backend_info
    assert info["weights"] == "random weights" and "random weights" in info["note"]
    assert info["last_render"]["windows"] == 3 and info["smpl_model"] == loaded.smpl.sha256  # 13 frames, 8-frame windows every 6


def test_frames_only_load_and_stream_at_render_size(loaded, pair):
    loop, persona = pair
    spec = RenderSpec(width=64, height=128, seed=3)
    loaded.prepare_guidance(loop, spec)
    loaded.prepare_persona(persona, spec)
    calls = {"fit": 0}
    import newsmotion_engine.render.backends.champ.fit as fit_mod

    orig = fit_mod.fit_pose

    def counting(*a, **k):
        calls["fit"] += 1
        return orig(*a, **k)

    fit_mod.fit_pose = counting
    try:
        frames = list(loaded.frames(loop, persona, _kp(loop, persona), spec))
    finally:
        fit_mod.fit_pose = orig
    assert calls["fit"] == 0 and len(frames) == loop.frames
    assert all(f.shape == (128, 64, 3) and f.dtype == np.uint8 for f in frames)


def test_missing_and_stale_sub_caches_name_what_to_build(loaded, pair, tmp_path):
    loop, persona = pair
    spec = RenderSpec(width=80, height=128)
    with pytest.raises(BackendCacheMissingError, match=r"backend_guidance_cache\[nod\]"):
        next(iter(loaded.frames(loop, persona, _kp(loop, persona), spec)))
    loaded.prepare_guidance(loop, spec)
    with pytest.raises(BackendCacheMissingError, match=r"backend_persona_cache\[anna\]"):
        next(iter(loaded.frames(loop, persona, _kp(loop, persona), spec)))
    loaded.prepare_persona(persona, spec)
    # Another loop content (same folder): the pose fit is stale until prepared again.
    loop.metadata = {"source": {"kind": "authored", "sha256": "c" * 64}}
    with pytest.raises(BackendCacheStaleError):
        loaded.load_guidance(loop, spec)
    assert loaded.prepare_guidance(loop, spec) is True
    # Another portrait: the persona latents are stale.
    persona.metadata = {"source": {"kind": "image", "sha256": "d" * 64}}
    with pytest.raises(BackendCacheStaleError):
        loaded.load_persona(persona, spec)


def test_another_smpl_file_gets_its_own_fit(loaded, pair, tmp_path):
    import importlib.util
    from pathlib import Path

    from newsmotion_engine.render.backends.champ.smpl import load_smpl_model

    loop, _ = pair
    spec = importlib.util.spec_from_file_location("champ_synthetic_smpl", Path(__file__).with_name("conftest.py"))
    synth = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(synth)
    loaded.prepare_guidance(loop, SPEC)
    first = loaded.smpl
    loaded.smpl = load_smpl_model(synth.write_npz(tmp_path / "other.npz", v_template=synth.make_smpl_arrays()["v_template"] * 1.1))
    try:
        with pytest.raises(BackendCacheMissingError):
            loaded.load_guidance(loop, SPEC)
        assert loaded.prepare_guidance(loop, SPEC) is True
    finally:
        loaded.smpl = first
    loaded.load_guidance(loop, SPEC)  # the first file's fit is still there, current
    dirs = sorted(p.name for p in (loop.path / "champ").iterdir() if not p.name.startswith("."))
    assert len(dirs) == 2 and all(d.startswith("smpl-") for d in dirs)


def test_cli_without_an_smpl_file_is_one_error_line(capsys, monkeypatch):
    from newsmotion_engine.cli import main

    monkeypatch.delenv("NEWSMOTION_SMPL_MODEL", raising=False)
    with pytest.raises(SystemExit) as exit_info:
        main(["render", "--persona", "anyone", "--loop", "nod", "--backend", "champ", "-o", "preset=tiny"])
    out, err = capsys.readouterr()
    lines = [line for line in (out + err).splitlines() if line.strip()]
    assert exit_info.value.code == 1
    assert len(lines) == 1 and lines[0].startswith("error: ") and "-o smpl_model=PATH" in lines[0]


def test_sparse_keyframes_pose_the_keyframes(loaded, pair, tmp_path, monkeypatch):
    from newsmotion_engine.render.keyframes import clip_schedule

    loop, persona = pair
    spec = RenderSpec(width=64, height=128, keyframes=2)
    loaded.prepare_guidance(loop, spec)
    loaded.prepare_persona(persona, spec)
    posed = []
    import newsmotion_engine.render.backends.champ.maps as maps_mod

    orig = maps_mod.guidance_frames
    monkeypatch.setattr(maps_mod, "guidance_frames", lambda model, pose, *a, **k: (posed.append(np.array(pose)), orig(model, pose, *a, **k))[1])
    tele = render_clip(loop, persona, loaded, spec, tmp_path / "k2.mp4")
    keys = list(clip_schedule(loop.frames, spec).keyframes)
    assert tele.frames == loop.frames and len(posed) == 1 and len(posed[0]) == len(keys)
    np.testing.assert_array_equal(posed[0], np.asarray(loaded.load_guidance(loop, spec).pose)[keys])


def test_channels_last_renders_the_same_frames(loaded, pair):
    """The convolution weights NHWC (denoising and reference UNets, guidance encoders, VAE): the
    same arithmetic, the same frames up to float rounding; removed, the default order again."""
    from newsmotion_engine.accel import registry
    from newsmotion_engine.accel.memory_format import ChannelsLast

    render = _prepared_render(loaded, pair)
    before = np.stack(list(render())).astype(np.int16)
    applied = registry.apply_accelerations(loaded.components, (ChannelsLast(),))
    try:
        assert "transformer" in applied.report["channels_last"]["modules"]
        after = np.stack(list(render())).astype(np.int16)
    finally:
        registry.remove_accelerations(loaded.components, applied)
    assert np.abs(after - before).max() <= 1, np.abs(after - before).max()


def test_one_key_cross_renders_the_same_frames_and_leaves_the_reference_readers(loaded, pair):
    """Both UNets' ``attn2`` read the one-token CLIP embedding (zeros for the unconditional rows):
    each becomes its value broadcast, the same frames up to float rounding; the self-attention's
    reference writers and readers are not touched; removed, the stock processors again."""
    from diffusers.models.attention_processor import Attention as DiffusersAttention

    from newsmotion_engine.accel import registry
    from newsmotion_engine.accel.one_key_cross import OneKeyCross, OneKeyCrossProcessor

    comps = loaded.components
    render = _prepared_render(loaded, pair)
    before = np.stack(list(render())).astype(np.int16)
    applied = registry.apply_accelerations(comps, (OneKeyCross(),))
    try:
        counts = applied.report["one_key_cross"]["modules"]
        assert set(counts) == {"transformer", "reference_unet"} and all(counts.values()), counts
        for unet in (comps.transformer, comps.reference_unet):
            for m in unet.modules():
                if isinstance(m, DiffusersAttention):
                    assert isinstance(m.processor, OneKeyCrossProcessor) == bool(m.is_cross_attention)
        after = np.stack(list(render())).astype(np.int16)
    finally:
        registry.remove_accelerations(comps, applied)
    assert np.abs(after - before).max() <= 1, np.abs(after - before).max()
    assert not any(isinstance(m.processor, OneKeyCrossProcessor) for m in comps.transformer.modules() if isinstance(m, DiffusersAttention))


def test_fp8_swaps_the_denoising_unets_block_linears_and_is_removed(loaded, pair):
    """FP8 linears reach the denoising UNet's down / mid / up blocks; the reference UNet (run once
    per render) stays as loaded. ``-o fp8=auto`` parses."""
    from newsmotion_engine.render.backends.champ.config import ChampOptions
    from tests.engine.render.backends.fp8_unet import check_fp8_round_trip

    check_fp8_round_trip(loaded.components, _prepared_render(loaded, pair),
                         untouched=(loaded.components.reference_unet,))  # fmt: skip
    opts = ChampOptions.from_mapping({"fp8": "auto", "compile": "blocks", "smpl_model": "body.npz"})
    assert [c.technique for c in opts.accelerations] == ["fp8", "compile"]


def _exact_kernels(monkeypatch) -> dict[str, int]:
    """The 8-bit kernel's entry points replaced by exact attention (the CPU has no Hopper tensor
    cores), counting their calls; the kernel reported usable."""
    from newsmotion_engine.accel import attention as A

    calls = {"plain": 0, "lse": 0}
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def plain(q, k, v, variant=None):
        calls["plain"] += 1
        return sdpa(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)).transpose(1, 2)

    def with_lse(q, k, v, variant=None):
        calls["lse"] += 1
        return A.reference_attention_lse(q, k, v)

    monkeypatch.setattr(A, "kernel_supported", lambda kernel: (True, "stub"))
    monkeypatch.setattr(A, "fp8_attention", plain)
    monkeypatch.setattr(A, "fp8_attention_lse", with_lse)
    return calls


def test_fp8_attention_wraps_the_reference_readers_and_renders_the_same_frames(loaded, pair, monkeypatch):
    """``attention=fp8-triton``: every reference reader of the denoising UNet is wrapped (its layer
    name and the shared bank kept; the reference UNet's writers untouched), the padded heads and
    the two key sets merged by log-sum-exp give the frames the stock processor gives (the kernel
    here exact), and removal puts the readers back."""
    from newsmotion_engine.accel import attention as A
    from newsmotion_engine.accel import registry
    from newsmotion_engine.render.backends.champ import attention as champ_attention
    from newsmotion_engine.render.backends.champ.modules import ReferenceReader

    render = _prepared_render(loaded, pair)
    before = np.stack(list(render())).astype(np.int16)
    unet = loaded.components.transformer
    readers = {n: m.processor for n, m in unet.named_modules() if isinstance(getattr(m, "processor", None), ReferenceReader)}
    writers = dict(loaded.components.reference_unet.attn_processors)
    calls = _exact_kernels(monkeypatch)
    monkeypatch.setattr(champ_attention, "_on_kernel_device", lambda x: True)
    applied = registry.apply_accelerations(loaded.components, (A.Attention(kernel="fp8-triton"),))
    try:
        wrapped = {n: m.processor for n, m in unet.named_modules() if n in readers}
        assert all(type(p) is champ_attention.Fp8ReferenceReader for p in wrapped.values()) and len(wrapped) == len(readers) > 0
        assert all(p.name == readers[n].name and p.state is readers[n].state for n, p in wrapped.items())
        assert applied.report["attention"]["self_attention_layers"] == len(readers)
        after = np.stack(list(render())).astype(np.int16)
    finally:
        registry.remove_accelerations(loaded.components, applied)
    assert calls["lse"] > 0 and calls["plain"] > 0  # conditional rows (own + reference keys), unconditional rows
    assert np.abs(after - before).max() <= 1, np.abs(after - before).max()
    assert all(m.processor is readers[n] for n, m in unet.named_modules() if n in readers)
    assert dict(loaded.components.reference_unet.attn_processors) == writers


def test_fp8_reference_reader_takes_only_what_the_kernel_computes(monkeypatch):
    """The padded heads: 40 -> 64 and 80 -> 128 taken, 160 (SD1.5's lowest levels) left to SDPA;
    a mask, or a reference of another length, falls back to the stock processor."""
    from diffusers.models.attention_processor import Attention as DiffusersAttention

    from newsmotion_engine.render.backends.champ import attention as champ_attention
    from newsmotion_engine.render.backends.champ.modules import ReferenceReader, ReferenceState

    monkeypatch.setattr(champ_attention, "_on_kernel_device", lambda x: True)
    reader = champ_attention.Fp8ReferenceReader(ReferenceReader("a.attn1", ReferenceState()))
    x = torch.empty(2, 12, 320)
    assert reader.takes(DiffusersAttention(query_dim=320, heads=8, dim_head=40), x, None)
    assert reader.takes(DiffusersAttention(query_dim=640, heads=8, dim_head=80), torch.empty(2, 12, 640), None)
    assert not reader.takes(DiffusersAttention(query_dim=1280, heads=8, dim_head=160), torch.empty(2, 12, 1280), None)
    assert not reader.takes(DiffusersAttention(query_dim=320, heads=8, dim_head=40), x, torch.empty(1))
    monkeypatch.setattr(champ_attention, "_on_kernel_device", lambda x: False)
    assert not reader.takes(DiffusersAttention(query_dim=320, heads=8, dim_head=40), x, None)


def test_fp8_reference_attention_math_equals_the_stock_processor(monkeypatch):
    """One call with the kernel exact: padded heads, the reference projected once per video and
    the two key sets merged give what ``AttnProcessor2_0`` gives over ``[own | reference]``."""
    from diffusers.models.attention_processor import Attention as DiffusersAttention

    from newsmotion_engine.render.backends.champ import attention as champ_attention
    from newsmotion_engine.render.backends.champ.modules import ReferenceReader, ReferenceState

    _exact_kernels(monkeypatch)
    monkeypatch.setattr(champ_attention, "_on_kernel_device", lambda x: True)
    torch.manual_seed(0)
    attn = DiffusersAttention(query_dim=80, heads=2, dim_head=40).eval()
    stock = ReferenceReader("a.attn1", ReferenceState())
    fp8 = champ_attention.Fp8ReferenceReader(stock)
    cond, ref = torch.randn(6, 24, 80), torch.randn(2, 24, 80)  # 2 videos x 3 frame rows
    with torch.no_grad():
        torch.testing.assert_close(fp8.attend_with_reference(attn, cond, ref, None, None),
                                   stock.attend_with_reference(attn, cond, ref, None, None), rtol=1e-4, atol=1e-5)  # fmt: skip
        torch.testing.assert_close(fp8.self_attend(attn, cond, None, None), stock.self_attend(attn, cond, None, None), rtol=1e-4, atol=1e-5)


def test_only_our_attention_kernel_is_offered_to_champ():
    from newsmotion_engine.render.backends.champ.config import ChampOptions

    with pytest.raises(BackendOptionError, match="fp8-triton"):
        ChampOptions.from_mapping({"attention": "cudnn", "smpl_model": "body.npz"})
    assert [c.technique for c in ChampOptions.from_mapping({"attention": "fp8-triton", "smpl_model": "body.npz"}).accelerations] == ["attention"]


def test_compile_scope_unet_blocks_compiles_the_resnets_and_wrappers_with_the_same_frames(loaded, pair):
    """``-o compile=blocks`` (its default scope, ``unet_blocks``): the resnets, the spatial-transformer
    and motion-module wrappers are what is compiled (inductor, on the CPU here, fullgraph), and the
    frames are the eager ones within one level; the UNet's own block list is back afterwards.
    ``transformer_blocks`` keeps the model's own list; without ``compile`` it is refused, while the
    default scope is simply moot."""
    from newsmotion_engine.accel import registry
    from newsmotion_engine.accel.compile import compiled_block_count
    from newsmotion_engine.render.backends.champ.config import COMPILE_SCOPES, ChampOptions

    opts = ChampOptions.from_mapping({**OPTS, "smpl_model": "body.npz", "compile": "blocks"})
    (compile_config,) = opts.accelerations
    assert opts.compile_scope == "unet_blocks" and compile_config.regions == COMPILE_SCOPES["unet_blocks"]
    narrow = ChampOptions.from_mapping({**OPTS, "smpl_model": "body.npz", "compile": "blocks", "compile_scope": "transformer_blocks"})
    assert [c.regions for c in narrow.accelerations] == [()]
    with pytest.raises(BackendOptionError, match="compile_scope"):
        ChampOptions.from_mapping({**OPTS, "smpl_model": "body.npz", "compile_scope": "transformer_blocks"})
    assert ChampOptions.from_mapping({**OPTS, "smpl_model": "body.npz"}).accelerations == ()
    render = _prepared_render(loaded, pair)
    eager = np.stack(list(render()))
    unet = loaded.components.transformer
    wanted = sum(type(m).__name__ in COMPILE_SCOPES["unet_blocks"] for m in unet.modules())
    applied = registry.apply_accelerations(loaded.components, opts.accelerations)
    try:
        assert compiled_block_count(unet) == wanted > 0
        compiled = np.stack(list(render()))
    finally:
        registry.remove_accelerations(loaded.components, applied)
    assert unet._repeated_blocks == ["BasicTransformerBlock"]
    assert np.abs(eager.astype(int) - compiled.astype(int)).max() <= 1


def test_short_attention_takes_the_motion_modules_self_attention_only(loaded):
    """``ShortAttention`` (in ``accelerations``; no flat option yet) is accepted by champ and wraps
    exactly the motion modules' frame attention of the denoising UNet: the spatial layers keep the
    reference readers, the cross-attentions and the reference UNet's writers are left alone."""
    from newsmotion_engine.accel import registry
    from newsmotion_engine.accel.short_attention import ShortAttention, ShortAttentionProcessor
    from newsmotion_engine.render.backends.champ.config import ChampOptions

    opts = ChampOptions.from_mapping({**OPTS, "smpl_model": "body.npz", "accelerations": (ShortAttention(),)})
    assert [c.technique for c in opts.accelerations] == ["short_attention"]
    unet = loaded.components.transformer
    motion = [m for name, m in unet.named_modules() if "motion_modules" in name and type(m).__name__ == "Attention"]
    applied = registry.apply_accelerations(loaded.components, opts.accelerations)
    try:
        wrapped = [m for m in unet.modules() if isinstance(getattr(m, "processor", None), ShortAttentionProcessor)]
        assert set(map(id, wrapped)) == set(map(id, motion)) and len(motion) > 0
        assert not any(isinstance(getattr(m, "processor", None), ShortAttentionProcessor) for m in loaded.components.reference_unet.modules())
    finally:
        registry.remove_accelerations(loaded.components, applied)
    assert not any(isinstance(getattr(m, "processor", None), ShortAttentionProcessor) for m in unet.modules())
