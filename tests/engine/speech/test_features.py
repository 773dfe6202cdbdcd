"""Audio-encoder features: wav2vec2 windows resampled to video frames with context, the SimHash
bypass (hits, near-duplicate lookup, refusal of another encoder's cache) and the features
sub-cache (built once, stale with the speech, the encoder or the recipe, one folder per recipe,
nothing half-written). The official recipe's own computation: test_clip_features.py."""

import json
from types import SimpleNamespace

import numpy as np
import pytest

from newsmotion_engine.errors import BadInputError, CacheStaleError
from newsmotion_engine.speech import features as F
from newsmotion_engine.speech.cache import ensure_speech_cache
from newsmotion_engine.speech.features import (
    DEFAULT_WINDOW,
    AudioEncoder,
    EncoderWindow,
    WindowedRecipe,
    encode_for_video,
    ensure_features,
    features_dir,
    load_features,
    open_encoder_cache,
    window_anchors,
    window_cores,
)
from newsmotion_engine.speech.tts import TextSpeech
from newsmotion_engine.speech.visemes import frame_count

SR = 16000
WINDOWED = WindowedRecipe()
INTRO = TextSpeech("Good evening.")
# wav2vec2's real conv strides and kernels (so 320 samples per frame), everything else tiny.
TINY = {"hidden_size": 16, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 32,
        "conv_dim": [8] * 7, "num_conv_pos_embeddings": 8, "num_conv_pos_embedding_groups": 2}  # fmt: skip


@pytest.fixture(scope="module")
def encoder():
    return AudioEncoder.load(config_overrides=TINY)


def _speech(samples):
    return SimpleNamespace(samples=np.asarray(samples, np.float32), sample_rate=SR)


def _babble(seconds, seed=0):
    """Speech-like noise: a band of tones with a syllable-rate envelope, at about -20 dBFS."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * SR)) / SR
    tone = sum(np.sin(2 * np.pi * f * t + rng.uniform(0, 6)) for f in rng.uniform(150, 3000, 6))
    envelope = 0.5 + 0.5 * np.sin(2 * np.pi * 4 * t + rng.uniform(0, 6))
    x = tone * envelope
    return (0.1 * x / np.sqrt(np.mean(x**2))).astype(np.float32)


def test_the_released_config_builds_wav2vec2_base():
    import torch
    from transformers import Wav2Vec2Config, Wav2Vec2Model

    from newsmotion_engine.speech.released import released_json

    with torch.device("meta"):
        model = Wav2Vec2Model(Wav2Vec2Config(**released_json("config.json")))
    assert model.config.hidden_size == 768 and model.config.num_hidden_layers == 12
    assert sum(p.numel() for p in model.parameters()) == 94_371_712
    assert released_json("preprocessor_config.json")["sampling_rate"] == SR


def test_a_window_gives_exactly_its_frames(encoder):
    for window in (DEFAULT_WINDOW, EncoderWindow(core_frames=5, margin_frames=2)):
        out = encoder.encode(_babble(window.samples / SR))
        assert out.shape == (window.frames, encoder.hidden_size) and out.dtype == np.float32
    assert encoder.weights_label == "random weights"


def test_random_weights_are_seeded_and_the_layer_choice_matters(encoder):
    x = _babble(DEFAULT_WINDOW.samples / SR)
    again = AudioEncoder.load(config_overrides=TINY)
    np.testing.assert_array_equal(again.encode(x), encoder.encode(x))
    assert again.digest == encoder.digest
    other_seed = AudioEncoder.load(config_overrides=TINY, seed=1)
    assert other_seed.digest != encoder.digest
    last = AudioEncoder.load(config_overrides=TINY, layers="last")
    assert not np.allclose(last.encode(x), encoder.encode(x)) and last.digest != encoder.digest
    with pytest.raises(ValueError, match="layers"):
        AudioEncoder.load(config_overrides=TINY, layers="first")


def test_all_layers_keep_their_own_axis_as_echomimic_reads_them(encoder, storage):
    layered = AudioEncoder.load(config_overrides=TINY, layers="all")
    x = _babble(DEFAULT_WINDOW.samples / SR)
    rows = layered.encode(x)
    assert rows.shape == (DEFAULT_WINDOW.frames, TINY["num_hidden_layers"], TINY["hidden_size"])
    np.testing.assert_allclose(rows.mean(1), encoder.encode(x), atol=1e-6)
    ensure_speech_cache(INTRO, storage, "intro", fps=25)
    mean = ensure_features(storage, "intro", fps=25, encoder=encoder)
    every = ensure_features(storage, "intro", fps=25, encoder=layered)  # the other layout replaces the cache
    assert every.features.shape == (*mean.features.shape[:2], TINY["num_hidden_layers"], TINY["hidden_size"])
    np.testing.assert_allclose(every.features.mean(2), mean.features, atol=1e-6)


def test_a_local_folder_loads_with_its_name_as_the_label(encoder, tmp_path):
    folder = tmp_path / "my-wav2vec2"
    encoder.model.save_pretrained(folder)
    loaded = AudioEncoder.load(folder)
    assert loaded.weights_label == "model folder my-wav2vec2"
    x = _babble(DEFAULT_WINDOW.samples / SR)
    np.testing.assert_allclose(loaded.encode(x), encoder.encode(x), atol=1e-5)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "model_type": "hubert"}))
    with pytest.raises(BadInputError, match="model_type is 'hubert'"):
        AudioEncoder.load(folder)
    (folder / "config.json").unlink()
    with pytest.raises(BadInputError, match="config.json: missing"):
        AudioEncoder.load(folder)


@pytest.mark.parametrize("fps,context", [(30, 2), (25, 0), (24, 3)])
def test_features_have_one_row_per_video_frame_with_clamped_context(encoder, fps, context):
    x = _babble(1.3)
    result = encode_for_video(_speech(x), fps, encoder=encoder, context=context)
    frames = frame_count(x.size / SR, fps)
    assert result.features.shape == (frames, 2 * context + 1, encoder.hidden_size)
    assert result.features.dtype == np.float32
    f = result.features
    for k in range(1, context + 1):  # column c+k of frame i is frame i+k's own row
        np.testing.assert_array_equal(f[:-k, context + k], f[k:, context])
        np.testing.assert_array_equal(f[-1, context + k], f[-1, context])  # clamped at the end
        np.testing.assert_array_equal(f[0, context - k], f[0, context])  # and at the start
    assert result.stats["windows"] == len(window_cores(x.size, window_anchors(x), DEFAULT_WINDOW))
    assert result.stats["hits"] == 0 and result.stats["max_distance"] is None


def test_rows_are_interpolated_at_each_video_frames_centre():
    times = np.array([0.01, 0.03, 0.05, 0.07])
    rows = times[:, None] * np.ones((1, 3))
    video = F._to_video_frames(times, rows, fps=50.0, count=5)
    np.testing.assert_allclose(video[:, 0], [0.01, 0.03, 0.05, 0.07, 0.07])  # held past the last row


def test_windows_restart_at_the_onset_after_a_pause():
    x = np.zeros(SR, np.float32)
    x[:8000] = _babble(0.5)
    onset = 12345
    x[onset:] = 0.1 * np.cos(2 * np.pi * 220 * np.arange(SR - onset) / SR)
    assert window_anchors(x) == [0, onset]
    short_pause = x.copy()
    short_pause[8000:onset] = _babble((onset - 8000) / SR, seed=3)
    short_pause[9000:10000] = 0.0  # 62 ms: too short to count as a pause
    assert window_anchors(short_pause) == [0]
    cores = window_cores(x.size, [0, onset], DEFAULT_WINDOW)
    assert [c for c, _ in cores if c >= onset][0] == onset
    assert all(stop == onset for c, stop in cores if c < onset)


def test_a_repeat_hits_the_cache_and_reuses_exactly_the_stored_output(encoder, tmp_path):
    x = _babble(1.5)
    fresh = encode_for_video(_speech(x), 30, encoder=encoder)
    cache = open_encoder_cache(tmp_path / "enc", encoder, max_distance=0)
    first = encode_for_video(_speech(x), 30, encoder=encoder, cache=cache)
    assert first.stats["hits"] < first.stats["windows"] and len(cache) > 0
    np.testing.assert_array_equal(first.features, fresh.features)
    # A new process opening the same folder sees the entries (persistent, shared across speeches).
    reopened = open_encoder_cache(tmp_path / "enc", encoder, max_distance=0)
    second = encode_for_video(_speech(x), 30, encoder=encoder, cache=reopened, verify=True)
    assert second.stats["hit_rate"] == 1.0 and second.stats["exact_hits"] == second.stats["windows"]
    assert second.stats["encoder_s"] == 0.0 and second.stats["encoder_s_avoided"] > 0
    assert second.stats["reuse_cosine_distance"]["max"] < 1e-6
    assert "random weights" in second.stats["note"]
    np.testing.assert_array_equal(second.features, fresh.features)


def test_near_duplicate_windows_hit_only_within_the_threshold(encoder, tmp_path):
    x = _babble(1.2, seed=1)
    rng = np.random.default_rng(5)
    noisy = x + rng.normal(0, 0.01, x.size).astype(np.float32)
    hits = {}
    for bits in (0, 20):
        cache = open_encoder_cache(tmp_path / f"enc{bits}", encoder, max_distance=bits)
        encode_for_video(_speech(x), 30, encoder=encoder, cache=cache)
        hits[bits] = encode_for_video(_speech(noisy), 30, encoder=encoder, cache=cache, verify=True).stats
    assert hits[0]["hits"] < hits[20]["hits"]
    assert hits[20]["hits"] > hits[20]["exact_hits"]  # some hits were near, not exact
    assert hits[20]["reuse_cosine_distance"]["windows"] == hits[20]["hits"]


def test_a_cache_of_another_encoder_or_window_is_refused(encoder, tmp_path):
    cache = open_encoder_cache(tmp_path / "enc", encoder)
    with pytest.raises(CacheStaleError):
        open_encoder_cache(tmp_path / "enc", AudioEncoder.load(config_overrides=TINY, seed=1))
    with pytest.raises(CacheStaleError):
        open_encoder_cache(tmp_path / "enc", encoder, window=EncoderWindow(core_frames=8, margin_frames=4))
    with pytest.raises(CacheStaleError, match="another encoder"):
        encode_for_video(_speech(_babble(0.5)), 30, encoder=encoder, cache=cache, window=EncoderWindow(8, 4))


def _leftovers(folder):
    return [p.name for p in folder.iterdir() if ".tmp-" in p.name or ".old-" in p.name]


def test_features_sub_cache_is_built_once_beside_the_speech_cache(storage, encoder, monkeypatch):
    speech, _ = ensure_speech_cache(INTRO, storage, "intro", fps=30)
    built = ensure_features(storage, "intro", fps=30, encoder=encoder, recipe=WINDOWED)
    target = features_dir(storage, "intro", 30, WINDOWED)
    assert target.parent == speech.path and (target / "features.npy").is_file()
    assert built.features.shape == (len(speech.visemes), 5, encoder.hidden_size)
    meta = json.loads((target / "metadata.json").read_text())
    assert meta["source"] == {"kind": "speech-cache", "digest": speech.digest} and meta["weights"] == "random weights"

    def no_encoder(window):
        raise AssertionError("a current features cache must not run the encoder")

    monkeypatch.setattr(encoder, "encode", no_encoder)
    again = ensure_features(storage, "intro", fps=30, encoder=encoder, recipe=WINDOWED)
    np.testing.assert_array_equal(again.features, built.features)
    assert again.stats == json.loads(json.dumps(built.stats))


def test_features_go_stale_with_another_encoder_or_speech(storage, encoder):
    ensure_speech_cache(INTRO, storage, "intro", fps=30)
    ensure_features(storage, "intro", fps=30, encoder=encoder)
    other = AudioEncoder.load(config_overrides=TINY, seed=1)
    with pytest.raises(CacheStaleError):
        load_features(storage, "intro", fps=30, encoder=other)
    rebuilt = ensure_features(storage, "intro", fps=30, encoder=other)
    assert json.loads((features_dir(storage, "intro", 30) / "metadata.json").read_text())["params"]["encoder"] == other.identity
    ensure_speech_cache(TextSpeech("Good night."), storage, "intro", fps=30)
    renewed = ensure_features(storage, "intro", fps=30, encoder=other)
    assert renewed.features.shape != rebuilt.features.shape or not np.array_equal(renewed.features, rebuilt.features)


def test_a_failed_features_build_writes_nothing(storage, encoder, monkeypatch):
    speech, _ = ensure_speech_cache(INTRO, storage, "intro", fps=30)

    def broken(window):
        raise RuntimeError("encoder died")

    monkeypatch.setattr(encoder, "encode", broken)
    with pytest.raises(RuntimeError, match="encoder died"):
        ensure_features(storage, "intro", fps=30, encoder=encoder, recipe=WINDOWED)
    assert not features_dir(storage, "intro", 30, WINDOWED).exists() and not _leftovers(speech.path)

    monkeypatch.undo()

    def broken_save(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(F.np, "save", broken_save)
    with pytest.raises(OSError, match="disk full"):
        ensure_features(storage, "intro", fps=30, encoder=encoder)
    assert not features_dir(storage, "intro", 30).exists() and not _leftovers(speech.path)


def test_each_recipe_has_its_own_sub_cache_and_a_recipe_change_invalidates_it(storage, encoder):
    """Official (the default) and windowed features of one speech are kept side by side; a recipe
    setting (the loudness target, the window) is part of the key, so its cache goes stale and is
    rebuilt; the official recipe refuses an encoder cache (it has no windows to reuse)."""
    from newsmotion_engine.speech.clip_features import OfficialRecipe

    ensure_speech_cache(INTRO, storage, "intro", fps=25)
    official = ensure_features(storage, "intro", fps=25, encoder=encoder)
    windowed = ensure_features(storage, "intro", fps=25, encoder=encoder, recipe=WINDOWED)
    assert features_dir(storage, "intro", 25).name == "audio-features-official-25fps"
    assert features_dir(storage, "intro", 25, WINDOWED).name == "audio-features-windowed-25fps"
    assert official.features.shape == windowed.features.shape and not np.allclose(official.features, windowed.features)
    np.testing.assert_array_equal(load_features(storage, "intro", fps=25, encoder=encoder).features, official.features)
    np.testing.assert_array_equal(load_features(storage, "intro", fps=25, encoder=encoder, recipe=WINDOWED).features,
                                  windowed.features)  # fmt: skip
    assert json.loads((features_dir(storage, "intro", 25) / "metadata.json").read_text())["params"]["recipe"] == "official"

    quieter = OfficialRecipe(loudness_lufs=-30.0)
    with pytest.raises(CacheStaleError):
        load_features(storage, "intro", fps=25, encoder=encoder, recipe=quieter)
    ensure_features(storage, "intro", fps=25, encoder=encoder, recipe=quieter)
    assert json.loads((features_dir(storage, "intro", 25) / "metadata.json").read_text())["params"]["loudness_lufs"] == -30.0
    with pytest.raises(CacheStaleError):
        load_features(storage, "intro", fps=25, encoder=encoder)
    with pytest.raises(CacheStaleError):
        load_features(storage, "intro", fps=25, encoder=encoder, recipe=WindowedRecipe(EncoderWindow(8, 4)))
    with pytest.raises(ValueError, match="windowed recipe only"):
        ensure_features(storage, "intro", fps=25, encoder=encoder, force=True, encoder_cache=open_encoder_cache(storage.root / "enc", encoder))
    assert F.feature_recipe("windowed") == WINDOWED
    with pytest.raises(ValueError, match="official, windowed"):
        F.feature_recipe("fast")


def test_audio_that_is_no_speech_cache_gets_its_features_cached_by_its_digest(storage, encoder, monkeypatch):
    """A story's assembled speech (a SpeechTrack): the official recipe's features under
    speech/clips/{digest}/, read back while the audio is the same; other audio, another folder."""
    from newsmotion_engine.speech.audio import SpeechTrack
    from newsmotion_engine.speech.features import clip_features_dir, ensure_clip_features
    from newsmotion_engine.speech.sources import list_speech_ids

    track = SpeechTrack(_babble(0.6), label="story evening")
    built = ensure_clip_features(storage, track, fps=25, encoder=encoder)
    target = clip_features_dir(storage, track, 25)
    assert target.parent.parent == storage.speech_root / "clips" and target.parent.name == track.digest[:32]
    assert built.features.shape == (frame_count(0.6, 25), 5, encoder.hidden_size) and built.stats["recipe"] == "official"
    meta = json.loads((target / "metadata.json").read_text())
    assert meta["source"] == {"kind": "audio", "digest": track.digest}
    assert list_speech_ids(storage) == []  # clips/ is no speech

    monkeypatch.setattr(encoder, "encode_at_frames", lambda *a: (_ for _ in ()).throw(AssertionError("cache must be read")))
    again = ensure_clip_features(storage, SpeechTrack(_babble(0.6), label="the same audio again"), fps=25, encoder=encoder)
    np.testing.assert_array_equal(again.features, built.features)
    assert clip_features_dir(storage, SpeechTrack(_babble(0.6, seed=1), label="other"), 25) != target
