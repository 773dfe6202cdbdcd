"""The echomimic-v3 backend on the tiny preset (CPU, random weights): a 2-step render through the
registry, the speech setting the clip's length and moving the frames, the guidance batch equal to
the stock two passes, the persona sub-cache (built once, then only loaded; stale and missing
refused), options and audio features refused with their reason. The speech tier is faked here
(``load_speech_audio``): these tests are about what the backend does with the features."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("diffusers")

pytestmark = pytest.mark.usefixtures("one_torch_thread")

from newsmotion_engine.errors import CacheMissingError, CacheNotReadyError  # noqa: E402
from newsmotion_engine.render import RenderSpec, get_backend, render_clip  # noqa: E402
from newsmotion_engine.render.fidelity import FidelityConfig  # noqa: E402
from newsmotion_engine.render.base import BackendCacheMissingError, BackendCacheStaleError, InvalidSpecError  # noqa: E402
from newsmotion_engine.render.backends.echomimic_v3 import backend as B  # noqa: E402
from newsmotion_engine.render.backends.echomimic_v3.audio import EchoMimicAudioError, SpeechAudio, audio_windows, segment_windows  # noqa: E402
from newsmotion_engine.render.backends.echomimic_v3.config import EchoMimicV3ConfigError, EchoMimicV3Options  # noqa: E402

SPEC = RenderSpec(width=64, height=128)


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """The ``pair`` of the render tests' conftest, once per module, with a loaded backend whose
    persona sub-cache is built (the later tests change options on it instead of loading again)."""
    from tests.engine.render.conftest import CachedLoop, CachedPersona, make_loop, make_persona

    root = tmp_path_factory.mktemp("echomimic")
    p, g = make_persona(144, 256), make_loop(13)
    (root / "loop").mkdir()
    (root / "persona").mkdir()
    loop = CachedLoop("nod", g.keypoints, path=root / "loop", metadata={"source": {"kind": "authored", "sha256": "a" * 64}})
    persona = CachedPersona("anna", p.portrait, p.person_mask, p.face_mask, p.landmarks, path=root / "persona",
                            metadata={"source": {"kind": "image", "sha256": "b" * 64}})  # fmt: skip
    b = _backend()
    b.prepare_persona(persona, SPEC)
    return loop, persona, b


def _backend(**kw):
    return get_backend("echomimic-v3", **{"preset": "tiny", "device": "cpu", "dtype": "float32", "steps": 2, **kw})


@pytest.fixture()
def fake_speech(monkeypatch):
    """Speech ``hello``: 0.5 s of random features at 25 fps (13 frames of [5, 1, 768]); records the calls."""
    calls = []

    def load(root, speech_id, *, fps, window, layers, channels, audio_model_path, recipe, build):
        calls.append((root, speech_id, fps, recipe))
        feats = np.random.default_rng(3).normal(size=(13, window, layers, channels)).astype(np.float32)
        return SpeechAudio(speech_id, feats, 0.5, "d1g35t")

    monkeypatch.setattr(B, "load_speech_audio", load)
    return calls


def _frames(backend, loop, persona, spec=SPEC):
    return np.stack(list(backend.frames(loop, persona, loop.keypoints, spec)))


def test_silent_render_through_the_registry_and_its_persona_cache(pair):
    """No speech: the loop's 13 frames, uint8 at the render size, labelled random weights; the
    persona sub-cache is refused before it exists, built once, then only loaded, and refused as
    stale by a backend with another prompt."""
    loop, persona = pair
    b = _backend()
    assert b.moves_lips is False  # no viseme track: the mouth follows the speech option's audio
    assert b.prepare_guidance(loop, SPEC) is False  # no loop artifacts: the model follows no pose
    with pytest.raises(BackendCacheMissingError, match="echomimic-v3 persona artifacts"):
        next(iter(b.frames(loop, persona, loop.keypoints, SPEC)))
    assert b.prepare_persona(persona, SPEC) is True
    assert b.prepare_persona(persona, SPEC) is False
    first = b.load_persona(persona, SPEC).first_condition  # the official masked-video condition
    assert first.shape == (20, 3, 16, 8)  # 9-frame segments: 3 latent frames of 128x64 / 8
    assert (first[:4, 0] == 1).all() and (first[:4, 1:] == 0).all()  # the i2v mask: only video frame 0 known
    out = _frames(b, loop, persona)
    assert out.shape == (13, 128, 64, 3) and out.dtype == np.uint8
    r = b.last_render
    # 13 frames at 30 fps -> 11 at 25 fps: two 9-frame segments overlapping by 4
    assert (r["model_frames"], r["segments"], r["segment_frames"], r["overlap_frames"], r["audio"]) == (11, 2, 9, 4, "silence")
    info = b.describe()
    assert info["weights"] == "random weights" and "random weights" in info["note"] and info["speech"] is None
    with pytest.raises(BackendCacheStaleError):
        next(iter(_backend(prompt="A news anchor is speaking.").frames(loop, persona, loop.keypoints, SPEC)))
    with pytest.raises(InvalidSpecError, match="keyframes=1"):
        next(iter(b.frames(loop, persona, loop.keypoints, RenderSpec(width=64, height=128, keyframes=2))))


def _with(backend, **options):
    """The same loaded backend with other options (no second model load in these tests)."""
    backend.options = dataclasses.replace(backend.options, **options)
    backend._speech = None
    return backend


def test_speech_sets_the_length_and_moves_the_frames(shared, fake_speech, tmp_path):
    loop, persona, b = shared
    _with(b, speech="hello", speech_root="/speech", batch_cfg=True)
    assert b.clip_frames(loop, SPEC) == 15  # 0.5 s at 30 fps, whatever the loop's length
    out = _frames(b, loop, persona)
    assert out.shape == (15, 128, 64, 3)
    assert b.last_render["audio"] == "d1g35t" and fake_speech[0] == ("/speech", "hello", 25, "official")
    assert b.describe()["speech_features"] == "d1g35t"  # the performed features are part of the render's inputs
    tele = render_clip(loop, persona, b, SPEC, tmp_path / "talk.mp4", fidelity=FidelityConfig())
    assert tele.frames == 15 and tele.pose_fidelity is None and "performs a speech" in tele.pose_fidelity_reason
    quiet = _frames(_with(b, speech=None), loop, persona)
    assert np.abs(out[:13].astype(int) - quiet.astype(int)).max() > 0  # the audio reaches the pixels


def test_guidance_batch_equals_the_stock_two_passes(shared, fake_speech):
    loop, persona, b = shared
    batched = _frames(_with(b, speech="hello", speech_root="/speech", chroma="off", batch_cfg=True), loop, persona).astype(int)
    two_passes = _frames(_with(b, batch_cfg=False), loop, persona).astype(int)
    assert np.abs(batched - two_passes).max() <= 1  # float32 batch vs two calls: at most a rounding flip
    assert b.last_render["teacache_skipped"] == 0


def test_teacache_skips_calls_per_pass_and_resets_per_segment(shared):
    """The registry's TeaCache (opt-in) on this model: with a threshold nothing reaches, every call
    after the warm-up step of each pass is skipped, in each of the two segments."""
    loop, persona, _ = shared
    b = _backend(steps=3, teacache=0.1, teacache_warmup=1, teacache_coefficients=(0.0, 0.0))  # never reaches 0.1
    b.prepare_persona(persona, SPEC)  # the shared persona cache: same model, nothing built
    assert _frames(b, loop, persona).shape == (13, 128, 64, 3)
    assert b.last_render["teacache_skipped"] == 2 * 2  # 2 segments x (3 steps - 1 warm-up) in the batched context


def test_model_size_and_retiming():
    o = EchoMimicV3Options()
    assert o.model_size(720, 1280) == (576, 1024)  # area capped at 768 x 768, the aspect kept, sides / 16
    assert o.model_size(64, 128) == (64, 128)
    assert B.retime_indices(6, 5, 25, 30).tolist() == [0, 1, 2, 3, 3, 4]
    assert B.retime_indices(3, 2, 25, 30).tolist() == [0, 1, 1]


def test_options_refused_with_their_reason():
    with pytest.raises(EchoMimicV3ConfigError, match="speech"):
        _backend(speech="Not An Id")
    with pytest.raises(EchoMimicV3ConfigError, match="CFGSchedule"):
        _backend(cfg_start=0.5)
    with pytest.raises(EchoMimicV3ConfigError, match="overlap_frames"):
        _backend(overlap_frames=8)  # the tiny preset's segments are 9 frames
    with pytest.raises(EchoMimicV3ConfigError, match="max_side"):
        _backend(max_side=100)
    with pytest.raises(EchoMimicV3ConfigError, match="unknown"):
        _backend(guidance_scale=3.0)


def test_audio_features_shaped_for_the_model():
    one_layer = np.ones((7, 5, 768), np.float32)
    assert audio_windows(one_layer, window=5, layers=1, channels=768).shape == (7, 5, 1, 768)
    with pytest.raises(EchoMimicAudioError, match="12 hidden layers"):
        audio_windows(one_layer, window=5, layers=12, channels=768)
    seg = segment_windows(np.ones((7, 5, 1, 2), np.float32), 4, 5)
    assert seg.shape == (5, 5, 1, 2) and seg[:3].min() == 1 and seg[3:].max() == 0  # past the end: silence


def test_speech_features_come_from_the_speech_tier(monkeypatch):
    """load_speech_audio reads the speech cache's duration and the feature cache at the model's fps,
    asking the encoder for every hidden layer when the model reads more than one (the release: 12),
    the layer average for a one-layer model; features of another shape are refused."""
    features = pytest.importorskip("newsmotion_engine.speech.features")
    from newsmotion_engine.render.backends.echomimic_v3.audio import load_speech_audio
    from newsmotion_engine.speech import cache as speech_cache

    asked = []
    monkeypatch.setattr(speech_cache, "load_speech_cache", lambda root, sid: type("S", (), {"duration_s": 0.52})())
    monkeypatch.setattr(features.AudioEncoder, "load", staticmethod(lambda path=None, *, layers="mean", **_: asked.append(layers) or layers))
    shapes = {"mean": (14, 5, 768), "all": (14, 5, 12, 768)}
    def read(root, sid, *, fps, encoder, recipe):
        assert recipe.name == "official"
        if sid == "unbuilt":
            raise CacheMissingError(f"{root}/{sid}/audio-features-25fps", "does not exist")
        return features.AudioFeatures(features=np.ones(shapes[encoder], np.float32), stats={})

    monkeypatch.setattr(features, "ensure_features", read)
    monkeypatch.setattr(features, "load_features", read)
    with pytest.raises(CacheNotReadyError, match="official speech features of 'unbuilt' at 25 fps is missing.*newsmotion render"):
        load_speech_audio("/s", "unbuilt", fps=25, window=5, layers=1, channels=768, audio_model_path=None)
    one = load_speech_audio("/s", "hello", fps=25, window=5, layers=1, channels=768, audio_model_path=None, build=True)
    assert one.features.shape == (14, 5, 1, 768) and one.duration_s == 0.52 and len(one.digest) == 16
    full = load_speech_audio("/s", "hello", fps=25, window=5, layers=12, channels=768, audio_model_path=None)
    assert full.features.shape == (14, 5, 12, 768)
    assert asked == ["mean", "mean", "all"]
    shapes["all"] = (14, 5, 768)
    with pytest.raises(EchoMimicAudioError, match="12 hidden layers"):
        load_speech_audio("/s", "hello", fps=25, window=5, layers=12, channels=768, audio_model_path=None)


def test_unbuilt_speech_features_are_reported_by_describe_and_refused_by_a_render(shared, monkeypatch):
    loop, persona, b = shared

    def unbuilt(*a, **k):
        raise CacheNotReadyError("speech features of 'gone' at 25 fps", "missing", "", "build them")

    monkeypatch.setattr(B, "load_speech_audio", unbuilt)
    _with(b, speech="gone", speech_root="/speech")
    assert b.describe()["speech_features"].startswith("not ready: speech features of 'gone'")
    with pytest.raises(CacheNotReadyError, match="build them"):
        b.clip_frames(loop, SPEC)
    _with(b, speech=None)


def test_the_official_feature_recipe_is_the_default_and_recorded(shared, fake_speech):
    """The speech features are computed as the release computes them unless ``audio_features=windowed``
    asks for the SimHash-able approximation; describe() (the render record's backend_info) says which."""
    _, _, b = shared
    assert EchoMimicV3Options.from_mapping({}).audio_features == "official"
    assert b.describe()["audio_features"] == "official"
    _with(b, speech="hello", speech_root="/speech")
    b.speech_audio()
    assert fake_speech[-1][-1] == "official"
    _with(b, audio_features="windowed")
    b.speech_audio()
    assert fake_speech[-1][-1] == "windowed" and b.describe()["audio_features"] == "windowed"
    _with(b, speech=None, audio_features="official")
    with pytest.raises(EchoMimicV3ConfigError, match="audio_features"):
        _backend(audio_features="fast")


def test_the_vae_runs_in_the_render_dtype_as_the_official_inference_does():
    """``infer_flash_pro.py`` moves its VAE to ``weight_dtype``; the Wan backends keep float32. The
    persona cache is keyed on the VAE dtype, so a bf16 and a float32 render never share latents."""
    from newsmotion_engine.render.backends.echomimic_v3.components import load_render_components, model_identity

    comps = load_render_components(EchoMimicV3Options(preset="tiny", device="cpu", dtype="bfloat16"))
    assert comps.vae_dtype == torch.bfloat16 and {p.dtype for p in comps.vae.parameters()} == {torch.bfloat16}
    assert comps.identity["vae_dtype"] == "bfloat16"
    f32 = model_identity(EchoMimicV3Options(preset="tiny", device="cpu", dtype="float32"), torch.device("cpu"))
    assert f32["vae_dtype"] == "float32" and f32["digest"] != comps.identity["digest"]
