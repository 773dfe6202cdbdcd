"""The official recipe (EchoMimicV3's ``get_audio_embed``): equal to the computation done by hand
with transformers' own feature extractor and wav2vec2's modules one by one; the conv features
interpolated to the frame count before the projection; the plain model at the native rate; the
per-frame window clamped at the ends; the -23 LUFS step making the input's gain irrelevant for an
encoder that does not normalise (chinese-wav2vec2-base, whose released settings are checked)."""

import hashlib

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from newsmotion_engine.render.backends.echomimic_v3.config import AUDIO_ENCODER_RELEASED  # noqa: E402
from newsmotion_engine.speech.clip_features import OfficialRecipe, encode_clip_at_video_rate  # noqa: E402
from newsmotion_engine.speech.features import AudioEncoder  # noqa: E402
from newsmotion_engine.speech.loudness import integrated_loudness  # noqa: E402

from tests.engine.speech.test_features import SR, TINY, _babble, _speech  # noqa: E402

# The SHA-256 of TencentGameMate/chinese-wav2vec2-base's two configs, as public download
# manifests for EchoMimicV3 pin them.
CHINESE_WAV2VEC2_SHA256 = {"config.json": "dc2cd2f989104b9510ce9e43a343a6f1fe55aa60baa1fcfca0c5908e6590b8b6",
                           "preprocessor_config.json": "c1707926644954affc391ab09ccfaf470ccd80af218d11350991090711441c09"}  # fmt: skip


@pytest.fixture(scope="module", params=["wav2vec2-base", "chinese-wav2vec2-base"])
def encoder(request):
    """Every layer kept (as EchoMimicV3 reads them); with and without the variance normalisation."""
    released = AUDIO_ENCODER_RELEASED if request.param == "chinese-wav2vec2-base" else None
    return AudioEncoder.load(config_overrides=TINY, layers="all", released=released)


def _by_hand(model, x, frames, fps, normalize, context=2):
    """get_audio_embed and the frame windowing after it, step by step."""
    import torch.nn.functional as F
    from transformers import Wav2Vec2FeatureExtractor

    level = x.astype(np.float64) * 10 ** ((-23.0 - integrated_loudness(x, SR)) / 20)
    clip = level[: int(frames / fps * SR)]
    extractor = Wav2Vec2FeatureExtractor(feature_size=1, sampling_rate=SR, padding_value=0.0, do_normalize=normalize,
                                         return_attention_mask=False)  # fmt: skip
    values = np.squeeze(extractor(clip, sampling_rate=SR).input_values)
    with torch.no_grad():
        conv = model.feature_extractor(torch.from_numpy(values).float()[None])
        conv = F.interpolate(conv, size=frames, mode="linear", align_corners=True)
        h, _ = model.feature_projection(conv.transpose(1, 2))
        enc = model.encoder
        h = enc.layer_norm(h + enc.pos_conv_embed(h))
        outputs = []
        for layer in enc.layers:
            h = layer(h)
            h = h[0] if isinstance(h, tuple) else h
            outputs.append(h[0])
    rows = torch.stack(outputs, dim=1).numpy()  # [frames, layers, hidden]
    return np.stack([rows[[min(max(i + k, 0), frames - 1) for k in range(-context, context + 1)]] for i in range(frames)])


@pytest.mark.parametrize("frames,fps", [(30, 25), (17, 25), (41, 30)])
def test_the_recipe_equals_the_computation_by_hand(encoder, frames, fps):
    x = _babble(1.4, seed=2)
    result = encode_clip_at_video_rate(_speech(x), frames, encoder=encoder, fps=fps)
    expected = _by_hand(encoder.model, x, frames, fps, encoder.normalize)
    assert result.features.shape == (frames, 5, TINY["num_hidden_layers"], TINY["hidden_size"])
    np.testing.assert_allclose(result.features, expected, rtol=1e-4, atol=1e-4)
    assert result.stats["recipe"] == "official" and result.stats["samples"] == int(frames / fps * SR)


def test_at_the_native_rate_it_is_the_plain_models_hidden_states(encoder):
    x = _babble(1.0)
    with torch.no_grad():
        out = encoder.model(torch.from_numpy(x)[None], output_hidden_states=True)
    native = out.hidden_states[0].shape[1]  # 49 conv frames for 1 s
    rows = encoder.encode_at_frames(x, native)
    np.testing.assert_allclose(rows, torch.stack(out.hidden_states[1:], dim=2)[0].numpy(), rtol=1e-5, atol=1e-6)


def test_the_conv_features_are_interpolated_before_the_projection(encoder):
    """With 2T-1 frames for T conv frames, align_corners puts frame 2k on conv frame k and frame
    2k+1 half way to the next: what the projection receives."""
    x = _babble(0.5)
    with torch.no_grad():
        conv = encoder.model.feature_extractor(torch.from_numpy(x)[None])[0].T.numpy()  # [T, channels]
    seen = []
    hook = encoder.model.feature_projection.register_forward_pre_hook(lambda _m, args: seen.append(args[0][0].numpy()))
    try:
        encoder.encode_at_frames(x, 2 * len(conv) - 1)
    finally:
        hook.remove()
    np.testing.assert_allclose(seen[0][0::2], conv, atol=1e-6)
    np.testing.assert_allclose(seen[0][1::2], (conv[:-1] + conv[1:]) / 2, atol=1e-6)


def test_each_frame_reads_its_neighbours_clamped_at_the_ends(encoder):
    f = encode_clip_at_video_rate(_speech(_babble(0.6)), 15, encoder=encoder, fps=25, context=2).features
    for k in (1, 2):  # column 2+k of frame i is frame i+k's own row
        np.testing.assert_array_equal(f[:-k, 2 + k], f[k:, 2])
        np.testing.assert_array_equal(f[k:, 2 - k], f[:-k, 2])
        np.testing.assert_array_equal(f[-1, 2 + k], f[-1, 2])
        np.testing.assert_array_equal(f[0, 2 - k], f[0, 2])
    one = encode_clip_at_video_rate(_speech(_babble(0.01)), 1, encoder=encoder, fps=25).features  # shorter than the conv's field
    assert one.shape[:2] == (1, 5) and np.isfinite(one).all()


def test_the_loudness_step_makes_the_input_gain_irrelevant(encoder):
    x = _babble(1.2, seed=4)
    loud = encode_clip_at_video_rate(_speech(x), 30, encoder=encoder, fps=25).features
    quiet = encode_clip_at_video_rate(_speech(0.2 * x), 30, encoder=encoder, fps=25).features
    np.testing.assert_allclose(quiet, loud, rtol=1e-4, atol=1e-5)
    raw_loud, raw_quiet = encoder.encode_at_frames(x, 30), encoder.encode_at_frames(0.2 * x, 30)
    other_target = encode_clip_at_video_rate(_speech(x), 30, encoder=encoder, fps=25, loudness_lufs=-30.0).features
    if encoder.normalize:  # the variance normalisation cancels a gain on its own
        np.testing.assert_allclose(other_target, loud, rtol=1e-3, atol=1e-4)
    else:  # the encoder reads the level: without the -23 LUFS step the gain would change the features
        assert not np.allclose(raw_quiet, raw_loud, atol=1e-3)
        assert not np.allclose(other_target, loud, atol=1e-3)


def test_the_flash_encoder_is_wav2vec2_base_without_the_variance_normalisation():
    """chinese-wav2vec2-base's released files (byte for byte: their published hashes) have
    wav2vec2-base's architecture; its feature extractor does not normalise."""
    import json

    from newsmotion_engine.speech.released import released_json

    for name, digest in CHINESE_WAV2VEC2_SHA256.items():
        assert hashlib.sha256((AUDIO_ENCODER_RELEASED / name).read_bytes()).hexdigest() == digest
    chinese, base = json.loads((AUDIO_ENCODER_RELEASED / "config.json").read_text()), released_json("config.json")
    architecture = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "conv_dim", "conv_kernel",
                    "conv_stride", "conv_bias", "feat_extract_norm", "do_stable_layer_norm", "num_conv_pos_embeddings",
                    "num_conv_pos_embedding_groups", "layer_norm_eps", "hidden_act", "feat_extract_activation")  # fmt: skip
    assert {k: chinese[k] for k in architecture} == {k: base[k] for k in architecture}
    assert AudioEncoder.load(config_overrides=TINY, released=AUDIO_ENCODER_RELEASED).normalize is False
    assert AudioEncoder.load(config_overrides=TINY).normalize is True
    assert OfficialRecipe().params["loudness_lufs"] == -23.0
