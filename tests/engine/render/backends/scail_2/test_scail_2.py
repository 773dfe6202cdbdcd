"""scail-2 backend on the tiny preset (CPU, random weights): the two tiers (encoders counted: none
at render time but the history seam), a render end to end through the registry, the modes, cache
invalidation and bad input. The loop is driven by a user clip (a drawn figure, matted with the
selfie segmenter), so no driver persona has to be built."""

from __future__ import annotations

import dataclasses
import sys
import types
from pathlib import Path

import cv2
import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("diffusers")

from newsmotion_engine.errors import BadInputError  # noqa: E402
from newsmotion_engine.guidance import driver  # noqa: E402
from newsmotion_engine.render import RenderSpec, get_backend, render_clip  # noqa: E402
from newsmotion_engine.render.base import BackendCacheMissingError, BackendCacheStaleError, available_backends  # noqa: E402
from newsmotion_engine.render.backends.scail_2.config import Scail2ConfigError, model_size  # noqa: E402

SPEC = RenderSpec(width=64, height=128)


def _backend(**kw):
    return get_backend("scail-2", **{"preset": "tiny", "device": "cpu", "dtype": "float32", "steps": 2, **kw})


def _fixtures():
    """The render tests' builders (conftest is not importable by name under --import-mode=importlib)."""
    import importlib.util

    path = Path(__file__).parents[2] / "conftest.py"
    spec = importlib.util.spec_from_file_location("_scail_render_fixtures", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


F = _fixtures()


def _write_clip(path, keypoints, frames=12, shade=0):
    out = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), 24, (64, 128))
    for k in range(frames):
        img, _, _ = F.draw_figure(keypoints[k % len(keypoints)], 64, 128, seed=k)
        out.write(cv2.cvtColor(np.clip(img.astype(int) + shade, 0, 255).astype(np.uint8), cv2.COLOR_RGB2BGR))
    out.release()


def _scene(root: Path):
    """Loop ``nod`` (13 frames at 30 fps: 10 at 24, two tiny segments) in a storage layout of its
    own, driven by a user clip of a drawn figure, and persona ``anna``."""
    g, p = F.make_loop(13), F.make_persona(144, 256)
    path = root / "motion" / "preprocessed" / "nod"
    path.mkdir(parents=True)
    (root / "persona").mkdir()
    loop = F.CachedLoop("nod", g.keypoints, path=path, metadata={"source": {"kind": "authored", "sha256": "a" * 64}})
    persona = F.CachedPersona("anna", p.portrait, p.person_mask, p.face_mask, p.landmarks, path=root / "persona",
                              metadata={"source": {"kind": "image", "sha256": "b" * 64}})  # fmt: skip
    folder = driver.user_clips_dir(root / "motion")
    folder.mkdir(parents=True)
    _write_clip(folder / "nod.mp4", loop.keypoints)
    return loop, persona


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """One scene prepared and rendered once (animation mode), the encoder runs counted around each."""
    from diffusers import AutoencoderKLWan
    from transformers import CLIPVisionModel, UMT5EncoderModel

    loop, persona = _scene(tmp_path_factory.mktemp("scail"))
    calls = {"vae.encode": 0, "image_encoder": 0, "text_encoder": 0}
    with pytest.MonkeyPatch.context() as mp:
        for key, cls, attr in (("vae.encode", AutoencoderKLWan, "encode"), ("image_encoder", CLIPVisionModel, "forward"),
                               ("text_encoder", UMT5EncoderModel, "forward")):  # fmt: skip
            def wrapped(self_, *a, _orig=getattr(cls, attr), _key=key, **k):
                calls[_key] += 1
                return _orig(self_, *a, **k)

            mp.setattr(cls, attr, wrapped)
        backend = _backend()
        prepared = (backend.prepare_guidance(loop, SPEC), backend.prepare_persona(persona, SPEC))
        built = dict(calls)
        frames = np.stack(list(backend.frames(loop, persona, loop.keypoints, SPEC)))
        rendered = dict(calls)
    return types.SimpleNamespace(loop=loop, persona=persona, backend=backend, prepared=prepared, built=built,
                                 rendered=rendered, frames=frames, last_render=dict(backend.last_render))  # fmt: skip


def test_registered_and_refuses_what_does_not_apply():
    assert "scail-2" in available_backends()
    from newsmotion_engine.accel.teacache import TeaCache

    for flat in ({"teacache": 0.1}, {"cfg_every": 2}, {"sparse_attention": 0.5}, {"pyramid_low_steps": 2}):
        with pytest.raises(Scail2ConfigError, match="does not apply"):
            _backend(**flat)
    with pytest.raises(Scail2ConfigError, match="does not apply"):
        _backend(accelerations=(TeaCache(threshold=0.1),))
    with pytest.raises(Scail2ConfigError, match="mode"):
        _backend(mode="pose")
    with pytest.raises(Scail2ConfigError, match="history"):
        _backend(segment_frames=5)
    assert _backend(fp8="auto", compile="blocks", attention="fp8-triton").options.has("attention")
    assert model_size(720, 1280) == (704, 1280) and model_size(64, 128) == (64, 128)


def test_tiers_hold_the_official_inputs_and_renders_only_load_them(world):
    loop, persona, backend = world.loop, world.persona, world.backend
    assert world.prepared == (True, True)
    # two driving segments (half size) + the reference frame; CLIP of the reference; prompt + negative in one call
    assert world.built == {"vae.encode": 3, "image_encoder": 1, "text_encoder": 1}
    assert world.rendered == {**world.built, "vae.encode": 4}  # a render encodes only the one history seam
    clip = driver.load_driving_clip(loop, SPEC.width, SPEC.height)
    assert clip.origin == "user" and clip.frames.shape[0] == 10  # 13 frames at 30 fps = 10 at 24
    plan = backend.plan(10)
    assert (plan.segments, plan.segment_frames, plan.prev_frames) == (2, 9, 5)
    g = backend.load_guidance(loop, SPEC)
    assert isinstance(g.pose_latents, np.memmap)
    assert g.pose_latents.shape == (2, 16, 3, 8, 4) and g.driving_masks.shape == (2, 28, 3, 8, 4)
    masks = np.asarray(g.driving_masks).reshape(2, 4, 7, 3, 8, 4)  # [S, sub-frame, colour, T_lat, h, w]
    assert 0 < masks[:, :, 0].mean() < 1  # white: the person covers part of the frame
    assert not masks[:, :, 1:].any()  # no other colour
    p = backend.load_persona(persona, SPEC)
    assert p.ref_latents.shape == (16, 1, 16, 8) and p.ref_mask.shape == (28, 1, 16, 8) and p.image_tokens.shape[0] == 1
    assert world.frames.shape == (13, 128, 64, 3) and world.frames.dtype == np.uint8 and world.frames.std() > 0
    assert world.last_render["segments"] == 2 and world.last_render["cond_passes"] == 4 == world.last_render["uncond_passes"]
    assert not backend.prepare_guidance(loop, SPEC) and not backend.prepare_persona(persona, SPEC)  # current: reused


def test_render_clip_end_to_end_and_describe_says_random_weights(world, tmp_path):
    tele = render_clip(world.loop, world.persona, world.backend, SPEC, tmp_path / "out.mp4")
    assert (tmp_path / "out.mp4").is_file() and tele.frames == 13
    info = world.backend.describe()
    assert info["weights"] == "random weights" and "random weights" in info["note"] and info["mode"] == "animation"


def test_replacement_mode_reads_the_same_caches_with_its_own_rope(world):
    r = _backend(mode="replacement", guidance_scale=1.0)
    assert not r.prepare_guidance(world.loop, SPEC) and not r.prepare_persona(world.persona, SPEC)  # the same caches
    fr = np.stack(list(r.frames(world.loop, world.persona, world.loop.keypoints, SPEC)))
    assert fr.shape == world.frames.shape and np.abs(fr.astype(int) - world.frames.astype(int)).mean() > 0
    assert r.describe()["mode"] == "replacement" and r.last_render["uncond_passes"] == 0  # CFG 1: one pass per step


def test_batched_guidance_renders_the_same_clip(world):
    b = _backend(batch_cfg=True)
    frames = np.stack(list(b.frames(world.loop, world.persona, world.loop.keypoints, SPEC)))
    assert np.abs(frames.astype(int) - world.frames.astype(int)).max() <= 1  # float32 batch-of-two vs two calls
    assert b.last_render["cond_passes"] == 4 == b.last_render["uncond_passes"] and b.describe()["batch_cfg"] is True


def test_caches_go_stale_on_what_they_depend_on(world):
    loop, persona = world.loop, world.persona
    other = _backend(prompt="someone else")
    with pytest.raises(BackendCacheStaleError, match=r"backend_guidance_cache\[nod\]"):  # another prompt: Tier 1 stale
        next(other.frames(loop, persona, loop.keypoints, SPEC))
    blue = dataclasses.replace(SPEC, background=(0, 0, 255))
    assert not world.backend.prepare_guidance(loop, blue)  # Tier 1 does not depend on the background...
    with pytest.raises(BackendCacheStaleError, match=r"backend_persona_cache\[anna\]"):  # ...Tier 2 does
        next(world.backend.frames(loop, persona, loop.keypoints, blue))
    with pytest.raises(BackendCacheMissingError, match="64x64"):
        next(world.backend.frames(loop, persona, loop.keypoints, RenderSpec(width=64, height=64)))


def test_the_model_size_is_cut_from_the_spec_and_framed_back_onto_it():
    from newsmotion_engine.render.backends.scail_2.backend import centre_crop, frame_onto

    frames = np.arange(2 * 144 * 80 * 3, dtype=np.uint32).reshape(2, 144, 80, 3).astype(np.uint8)
    mw, mh = model_size(80, 144)
    inner = centre_crop(frames, mw, mh)
    assert (mw, mh) == (64, 128) and inner.shape == (2, 128, 64, 3)
    np.testing.assert_array_equal(inner, frames[:, 8:136, 8:72])
    first = inner[0]
    framed = frame_onto(first, 80, 144, (0, 177, 64))
    np.testing.assert_array_equal(framed[8:136, 8:72], first)
    assert (framed[:8] == (0, 177, 64)).all() and (framed[:, 72:] == (0, 177, 64)).all()
    assert frame_onto(first, 64, 128, (0, 0, 0)) is first  # the spec is the model size: as generated
    assert centre_crop(frames[..., 0], mw, mh).shape == (2, 128, 64)  # mattes too


def test_model_folder_errors_name_the_problem(tmp_path):
    with pytest.raises(BadInputError, match="does not exist"):
        _backend(model_path=str(tmp_path / "nope")).load()
    root = tmp_path / "model"
    for sub in ("transformer", "vae", "scheduler", "image_encoder", "text_encoder", "tokenizer"):
        (root / sub).mkdir(parents=True)
    with pytest.raises(BadInputError, match="SCAIL2Pipeline"):
        _backend(model_path=str(root)).load()
    (root / "model_index.json").write_text('{"_class_name": "WanAnimatePipeline"}')
    for sub, name in (("transformer", "config.json"), ("vae", "config.json"), ("scheduler", "scheduler_config.json"),
                      ("image_encoder", "config.json"), ("text_encoder", "config.json"), ("tokenizer", "tokenizer_config.json")):  # fmt: skip
        (root / sub / name).write_text('{"_class_name": "WanSCAILModel"}')
    for sub in ("transformer", "vae", "image_encoder", "text_encoder"):
        (root / sub / "model.safetensors").write_bytes(b"x")
    with pytest.raises(BadInputError, match="wrong architecture for scail-2"):
        _backend(model_path=str(root)).load()


def _model_folder(root, official):
    """A SCAIL-2 folder in the documented layout: the official DiT (tiny, official names) beside tiny
    diffusers-format Wan components and a word-level tokenizer."""
    from diffusers import AutoencoderKLWan
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import CLIPVisionConfig, CLIPVisionModel, PreTrainedTokenizerFast, UMT5Config, UMT5EncoderModel

    from newsmotion_engine.render.backends.scail_2.config import PRESETS
    from newsmotion_engine.render.backends.scail_2.released import RELEASE

    tiny = PRESETS["tiny"]
    official.write(root / "transformer")
    (root / "model_index.json").write_text('{"_class_name": "SCAIL2Pipeline"}')
    AutoencoderKLWan(**tiny.vae).save_pretrained(root / "vae")
    CLIPVisionModel(CLIPVisionConfig(**tiny.image_encoder)).save_pretrained(root / "image_encoder")
    UMT5EncoderModel(UMT5Config(**tiny.text_encoder)).save_pretrained(root / "text_encoder")
    words = Tokenizer(models.WordLevel({"<pad>": 0, "</s>": 1, "<unk>": 2, "a": 3, "news": 4, "presenter": 5}, unk_token="<unk>"))
    words.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=words, pad_token="<pad>", eos_token="</s>", unk_token="<unk>").save_pretrained(root / "tokenizer")
    (root / "scheduler").mkdir()
    (root / "scheduler" / "scheduler_config.json").write_text((RELEASE / "scheduler" / "scheduler_config.json").read_text())
    return root


def test_model_check_reads_the_official_key_names_and_names_what_is_wrong(official, tmp_path):
    from safetensors.torch import save_file

    from newsmotion_engine.render.model_check import check_model

    root = _model_folder(tmp_path / "SCAIL-2", official)
    found = check_model(root)
    rows = {row[0]: row for row in found.rows}
    assert rows["transformer"][1] == "WanSCAILModel" and "num_layers=2" in rows["transformer"][2]
    assert rows["transformer keys"][2] == f"all {len(official.shapes(official.tiny, official.text_dim))} tensors map onto SCAIL2Transformer3DModel"
    assert found.options == f"--backend scail-2 -o model_path={root}"
    save_file({"blocks.0.self_attn.q.weight": torch.zeros(3, 3)}, str(root / "transformer" / "model-00001-of-00002.safetensors"))
    with pytest.raises(BadInputError, match=r"transformer: does not fit the SCAIL-2 DiT of config.json: blocks\.0\.self_attn\.q\.weight has shape \[3, 3\]"):
        check_model(root)
    # A converted checkpoint without the index is still SCAIL-2's (its transformer config says so): told what it lacks.
    (root / "model_index.json").unlink()
    with pytest.raises(BadInputError, match=r"model_index\.json: missing from the SCAIL-2 model folder.*SCAIL2Pipeline"):
        check_model(root)


def test_a_model_folder_in_the_official_layout_loads_checks_and_renders(official, tmp_path):
    """And the loop's Tier 1 is rebuilt when its driving clip changes."""
    from newsmotion_engine.render.model_check import check_model

    loop, persona = _scene(tmp_path / "scene")
    root = _model_folder(tmp_path / "SCAIL-2", official)
    found = check_model(root)
    assert (found.backend, found.layout) == ("scail-2", "SCAIL2Pipeline")
    assert found.release.startswith("transformer differs from zai-org/SCAIL-2 in dim=24")
    assert found.defaults["scheduler"] == "UniPCMultistepScheduler (shift 3.0)" and found.defaults["steps"] == 40
    backend = _backend(model_path=str(root))
    backend.load()
    sd = official.write(tmp_path / "again")  # the same seed: the same tensors
    assert torch.equal(backend.components.transformer.blocks[0].attn1.to_q.weight, sd["blocks.0.self_attn.q.weight"])
    assert backend.describe()["weights"] == f"folder {root.resolve()}" and "note" not in backend.describe()
    assert backend.prepare_guidance(loop, SPEC) and backend.prepare_persona(persona, SPEC)
    frames = np.stack(list(backend.frames(loop, persona, loop.keypoints, SPEC)))
    assert frames.shape == (13, 128, 64, 3)
    before = np.array(backend.load_guidance(loop, SPEC).pose_latents)
    _write_clip(driver.find_user_clip(tmp_path / "scene" / "motion", "nod"), loop.keypoints, shade=40)
    assert backend.prepare_guidance(loop, SPEC)  # the clip rebuilt, and Tier 1 (keyed on the clip's digest) with it
    assert np.abs(np.asarray(backend.load_guidance(loop, SPEC).pose_latents) - before).max() > 0
    assert not backend.prepare_guidance(loop, SPEC)
