import json

import numpy as np
import pytest
import torch

from newsmotion_engine import cachedir
from newsmotion_engine.render.musetalk.audio import audio_tokens, whisper_hidden_states
from newsmotion_engine.render.musetalk.avatar import NO_FACE, blend_box, ensure_avatar, face_box, prepare_avatar
from newsmotion_engine.render.musetalk.components import (MuseTalkModelError, build_unet, load_components,
                                                          positional_encoding)
from newsmotion_engine.render.musetalk.config import MuseTalkConfigError, MuseTalkOptions, preset_config, released
from newsmotion_engine.render.musetalk.stage import StageStats, avatar_index, lip_sync_frames

from .conftest import synthetic_face


def _count(module):
    return sum(p.numel() for p in module.parameters())


def test_released_architecture_on_meta():
    from accelerate import init_empty_weights
    from diffusers import AutoencoderKL
    from transformers import WhisperConfig
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    cfg = preset_config("v15")
    with init_empty_weights():
        unet = build_unet(cfg["unet"])
        # The same builder with Stable Diffusion 1.5's text width and 4 input channels is SD 1.5's
        # published UNet (859,520,964 parameters): MuseTalk changes exactly those two fields.
        sd15 = build_unet({**cfg["unet"], "cross_attention_dim": 768, "in_channels": 4})
        vae = AutoencoderKL(**cfg["vae"])
        whisper = WhisperEncoder(WhisperConfig(**cfg["whisper"]))
    assert _count(sd15) == 859_520_964
    assert _count(unet) == 849_947_844
    assert _count(vae) == 83_653_863  # sd-vae-ft-mse
    assert _count(whisper) == 8_208_384  # whisper-tiny's encoder
    sd = unet.state_dict()
    assert sd["conv_in.weight"].shape == (320, 8, 3, 3)
    assert sd["down_blocks.0.attentions.0.transformer_blocks.0.attn2.to_k.weight"].shape == (320, 384)
    assert sd["conv_out.weight"].shape == (4, 320, 3, 3)
    assert len(whisper.layers) == 4  # 5 hidden states: 50 audio tokens per frame


def test_options_refuse_bad_values():
    with pytest.raises(MuseTalkConfigError, match="preset"):
        MuseTalkOptions(preset="v2")
    with pytest.raises(MuseTalkConfigError, match="batch_size"):
        MuseTalkOptions(batch_size=0)
    assert released()["inference"]["extra_margin"] == MuseTalkOptions().extra_margin


def _write_official_folder(root, tiny_cfg, *, bad_unet=False):
    from diffusers import AutoencoderKL
    from transformers import WhisperConfig, WhisperFeatureExtractor, WhisperModel

    torch.manual_seed(3)
    (root / "musetalkV15").mkdir(parents=True)
    (root / "musetalkV15" / "musetalk.json").write_text(json.dumps({"_class_name": "UNet2DConditionModel", **tiny_cfg["unet"]}))
    unet = build_unet(tiny_cfg["unet"])
    state = unet.state_dict()
    if bad_unet:
        state.pop("conv_in.weight")
    torch.save(state, root / "musetalkV15" / "unet.pth")
    AutoencoderKL(**tiny_cfg["vae"]).save_pretrained(root / "sd-vae")
    WhisperModel(WhisperConfig(**tiny_cfg["whisper"])).save_pretrained(root / "whisper")
    WhisperFeatureExtractor(feature_size=80).save_pretrained(root / "whisper")
    return unet


def test_official_layout_loads(tmp_path):
    cfg = preset_config("tiny")
    unet = _write_official_folder(tmp_path / "MuseTalk", cfg)
    comps = load_components(MuseTalkOptions(model_path=str(tmp_path / "MuseTalk"), preset="tiny", device="cpu"))
    assert comps.weights_label.startswith("weights from")
    assert torch.equal(comps.unet.conv_in.weight, unet.conv_in.weight)
    with pytest.raises(MuseTalkModelError, match="no sd-vae/config.json"):
        (tmp_path / "partial" / "musetalkV15").mkdir(parents=True)
        for name in ("musetalk.json", "unet.pth"):
            (tmp_path / "partial" / "musetalkV15" / name).write_bytes((tmp_path / "MuseTalk" / "musetalkV15" / name).read_bytes())
        load_components(MuseTalkOptions(model_path=str(tmp_path / "partial"), preset="tiny", device="cpu"))


def test_a_unet_that_does_not_fit_is_refused(tmp_path):
    _write_official_folder(tmp_path / "m", preset_config("tiny"), bad_unet=True)
    with pytest.raises(MuseTalkModelError, match="1 missing"):
        load_components(MuseTalkOptions(model_path=str(tmp_path / "m"), preset="tiny", device="cpu"))


def test_audio_tokens_window_as_the_official_inference():
    inference = released()["inference"]
    # hidden frame k of layer l holds k + 1000 * l: every token names where it came from
    hidden = (np.arange(100)[:, None, None] + 1000 * np.arange(5)[None, :, None] + np.zeros((1, 1, 384))).astype(np.float32)
    tokens = audio_tokens(hidden, 2.0, 25, inference)
    assert tokens.shape == (50, 50, 384)
    assert np.all(tokens[0, :20] == 0)  # two video frames of left context before the speech: zeros
    # frame 10: from 50 Hz frame 20 in the padded copy = hidden frame 16 (4 zero frames in front)
    first = tokens[10].reshape(10, 5, 384)[:, :, 0]
    assert np.array_equal(first[:, 0], np.arange(16, 26))
    assert np.array_equal(first[0], 16 + 1000 * np.arange(5))


def test_whisper_hidden_states(tiny):
    samples = (0.1 * np.sin(np.arange(16000) / 16000 * 2 * np.pi * 200)).astype(np.float32)
    hidden = whisper_hidden_states(samples, tiny)
    assert hidden.shape == (50, 5, 384)
    assert np.isfinite(hidden).all()


def test_face_box_follows_the_official_rule():
    face = synthetic_face()
    x1, y1, x2, y2 = face_box(face, 400, 10)
    nose, bottom = int(face[29, 1]), int(face[:, 1].max())
    assert (x1, x2) == (int(face[:, 0].min()), int(face[:, 0].max()))
    assert y1 == nose - (bottom - nose) and y2 == bottom + 10
    assert face_box(face - [500, 0], 400, 10) is None  # off the frame's left edge
    bx1, by1, bx2, by2 = blend_box((x1, y1, x2, y2), 1.5)
    assert bx2 - bx1 == by2 - by1 >= 1.5 * max(x2 - x1, y2 - y1) - 2


def test_avatar_index_plays_forward_then_backward():
    assert [avatar_index(i, 3) for i in range(8)] == [0, 1, 2, 2, 1, 0, 0, 1]
    assert avatar_index(5, 1) == 0


def _clip(n=3, seed=0):
    rng = np.random.default_rng(seed)
    frames = (rng.random((n, 320, 240, 3)) * 255).astype(np.uint8)
    faces = np.stack([synthetic_face(seed=i) for i in range(n)])
    return frames, faces


def test_stage_redraws_only_the_lower_face(tiny, tiny_opts):
    frames, faces = _clip()
    faces[1] = np.nan  # no face found on frame 1: it passes through
    avatar = prepare_avatar(frames, faces, tiny, tiny_opts)
    assert avatar.face_boxes[1, 0] == NO_FACE
    assert avatar.masks[0, :128 - 13].max() == 0 and avatar.masks[0].max() > 200  # lower half only, blurred by 12 px
    tokens = np.random.default_rng(1).normal(size=(5, 50, 384)).astype(np.float32)
    stats = StageStats()
    out = list(lip_sync_frames(frames, avatar, tokens, tiny, batch_size=4, stats=stats))
    assert len(out) == 5 and stats.redrawn == 3 and stats.unet_calls == 1  # the second batch is frame 1 alone
    assert np.array_equal(out[1], frames[1]) and np.array_equal(out[4], frames[1])  # 0 1 2 2 1: frame 1 twice
    bx1, by1, bx2, by2 = avatar.blend_boxes[0]
    changed = np.any(out[0] != frames[0], axis=-1)
    assert changed.any()
    rows, cols = np.nonzero(changed)
    assert rows.min() >= by1 + 0.4 * (by2 - by1) and rows.max() < by2 and cols.min() >= bx1 and cols.max() < bx2


def test_avatar_sub_cache_is_built_once_and_rebuilt_for_a_new_render(tiny, tiny_opts, tmp_path):
    frames, faces = _clip(2)
    where = tmp_path / "avatar"
    a = ensure_avatar(where, frames, faces, tiny, tiny_opts, {"kind": "render", "sha256": "a"})
    stamp = (where / "metadata.json").stat().st_mtime_ns
    b = ensure_avatar(where, frames, faces, tiny, tiny_opts, {"kind": "render", "sha256": "a"})
    assert (where / "metadata.json").stat().st_mtime_ns == stamp
    assert np.array_equal(a.latents, b.latents)
    ensure_avatar(where, frames, faces, tiny, tiny_opts, {"kind": "render", "sha256": "b"})
    assert cachedir.read_metadata(where, __import__("newsmotion_engine.render.musetalk.avatar", fromlist=["x"]).AVATAR_SCHEMA)["source"]["sha256"] == "b"


def test_positional_table():
    table = positional_encoding(50, 384)
    assert table.shape == (1, 50, 384)
    assert torch.allclose(table[0, 0, 0::2], torch.zeros(192)) and torch.allclose(table[0, 0, 1::2], torch.ones(192))
