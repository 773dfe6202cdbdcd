"""EchoMimicV3's transformer: the released architecture on the meta device (parameter count,
state-dict keys and shapes, every key mapped to an official name), the audio split per latent
frame as the official ``get_ai2v_audio``, the audio attention's per-frame structure, and loading
a tiny checkpoint written in the official layout (the key map), with bad files refused."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("diffusers")

pytestmark = pytest.mark.usefixtures("one_torch_thread")

from newsmotion_engine.errors import BadInputError  # noqa: E402
from newsmotion_engine.render.backends.echomimic_v3 import components, keymap  # noqa: E402
from newsmotion_engine.render.backends.echomimic_v3.config import PRESETS, EchoMimicV3Options, released  # noqa: E402
from newsmotion_engine.render.backends.echomimic_v3.model import EchoMimicV3Transformer3DModel, latent_frame_audio  # noqa: E402

TINY = PRESETS["tiny"].transformer


def _tiny(seed: int = 0, **kw) -> EchoMimicV3Transformer3DModel:
    torch.manual_seed(seed)
    return EchoMimicV3Transformer3DModel(**{**TINY, **kw}).eval()


def test_released_architecture_on_meta():
    """flash-pro: 1,863,772,992 parameters (counted here: Wan 1.3B i2v backbone, 36 input
    channels, plus the audio projection and 30 blocks x 4 audio linears); the audio modules have
    the official shapes; every key has an official name and maps back to itself."""
    with torch.device("meta"):
        model = EchoMimicV3Transformer3DModel(**PRESETS["flash-pro"].transformer)
    sd = model.state_dict()
    assert sum(v.numel() for v in sd.values()) == 1_863_772_992
    assert len(sd) == 1203
    shapes = {k: tuple(v.shape) for k, v in sd.items()}
    assert shapes["patch_embedding.weight"] == (1536, 36, 1, 2, 2)
    assert shapes["audio_injection.proj1.weight"] == (512, 5 * 12 * 768)
    assert shapes["audio_injection.proj1_vf.weight"] == (512, 8 * 12 * 768)
    assert shapes["audio_injection.proj3.weight"] == (32 * 1536, 512)
    assert shapes["blocks.29.attn2.to_k_audio.weight"] == (1536, 1536)
    assert shapes["blocks.0.attn2.add_k_proj.weight"] == (1536, 1536)
    assert shapes["condition_embedder.image_embedder.ff.net.0.proj.weight"] == (1280, 1280)
    for key in sd:
        official = keymap.ours_to_official(key)
        assert official is not None and keymap.official_to_ours(official) == key, key
    assert keymap.ours_to_official("blocks.7.norm2.weight") == "blocks.7.norm3.weight"
    assert keymap.ours_to_official("blocks.7.attn2.norm_k_audio.weight") == "blocks.7.cross_attn.norm_k_audio.weight"


def test_released_official_config_maps_onto_our_constructor():
    rel = released()
    ours = {k: v for k, v in rel["transformer"].items() if not k.startswith("_")}
    assert keymap.transformer_kwargs(rel["official_transformer"], ours) == ours
    with pytest.raises(ValueError, match="i2v"):
        keymap.transformer_kwargs({**rel["official_transformer"], "model_type": "t2v"}, ours)


def test_audio_split_per_latent_frame_is_the_official_one():
    """Latent frame 0 reads video frame 0's window; latent frame j >= 1 reads video frame 4j-3's
    window up to its centre, the centres of 4j-2 and 4j-1, and 4j's window from its centre."""
    f, w = 9, 5
    audio = torch.arange(f * w, dtype=torch.float32).view(1, f, w, 1, 1)  # value = 5 * frame + slot
    first, later = latent_frame_audio(audio, w)
    assert first.flatten().tolist() == [0, 1, 2, 3, 4]
    assert later.shape == (1, 2, 8, 1, 1)
    for j in (1, 2):
        a, b, c, d = 4 * j - 3, 4 * j - 2, 4 * j - 1, 4 * j
        expected = [5 * a + s for s in range(3)] + [5 * b + 2, 5 * c + 2] + [5 * d + s for s in range(2, 5)]
        assert later[0, j - 1].flatten().tolist() == expected


def _inputs(model, frames=9, batch=1):
    cfg = model.config
    g = torch.Generator().manual_seed(1)
    x = torch.randn(batch, 36, (frames - 1) // 4 + 1, 4, 4, generator=g)
    text = torch.randn(batch, 512, cfg.text_dim, generator=g)
    image = torch.randn(batch, 257, 1280, generator=g)
    audio = torch.randn(batch, frames, cfg.audio_window, cfg.audio_layers, cfg.audio_channels, generator=g)
    return x, torch.tensor([700.0] * batch), text, image, audio


def test_audio_reaches_only_its_latent_frame_within_a_block():
    """One block: self-attention mixes frames before the audio attention, the FFN is per token,
    so changing the audio of latent frame 1 (video frames 1-4) changes latent frame 1 only."""
    model = _tiny(num_layers=1)
    x, t, text, image, audio = _inputs(model)
    with torch.no_grad():
        base = model(x, t, text, image, audio).sample
        moved = audio.clone()
        moved[:, 1:5] += 3.0
        out = model(x, t, text, image, moved).sample
    diff = (out - base).abs().amax(dim=(0, 1, 3, 4))
    assert diff[1] > 1e-3 and diff[0] == 0 and diff[2] == 0


def test_batch_of_two_equals_two_calls():
    """The audio-CFG batch (ours) computes what two separate passes (stock) compute."""
    model = _tiny()
    x, t, text, image, audio = _inputs(model)
    zero = torch.zeros_like(audio)
    with torch.no_grad():
        a = model(x, t, text, image, audio).sample
        b = model(x, t, text, image, zero).sample
        both = model(x.expand(2, -1, -1, -1, -1), t.expand(2), text.expand(2, -1, -1), image.expand(2, -1, -1),
                     torch.cat([audio, zero])).sample  # fmt: skip
    torch.testing.assert_close(both, torch.cat([a, b]), rtol=1e-5, atol=1e-5)


def _write_official(path, model) -> None:
    from safetensors.torch import save_file

    save_file({keymap.ours_to_official(k): v.contiguous() for k, v in model.state_dict().items()}, str(path))


def test_loads_a_checkpoint_in_the_official_layout(tmp_path):
    """A tiny model's weights saved under the official names (and an original-layout config.json)
    load into a freshly built model through the key map: every tensor equal."""
    src = _tiny(seed=5)
    (tmp_path / "transformer").mkdir()
    _write_official(tmp_path / "transformer" / components.TRANSFORMER_WEIGHTS, src)
    official = {"model_type": "i2v", "dim": 24, "num_heads": 2, "ffn_dim": 32, "num_layers": 2, "in_dim": 36, "out_dim": 16,
                "text_dim": 32, "freq_dim": 32, "eps": 1e-6}  # fmt: skip
    (tmp_path / "transformer" / "config.json").write_text(json.dumps(official))
    opts = EchoMimicV3Options(model_path=str(tmp_path), device="cpu", dtype="float32")
    kwargs = components.folder_transformer_kwargs(opts)
    assert kwargs["num_attention_heads"] == 2 and kwargs["attention_head_dim"] == 12 and kwargs["in_channels"] == 36
    kwargs.update(audio_layers=TINY["audio_layers"], audio_intermediate_dim=16, audio_context_tokens=4)
    dst = _tiny(seed=9, **{k: kwargs[k] for k in ("num_layers", "ffn_dim")})
    components.load_transformer_weights(dst, tmp_path / "transformer" / components.TRANSFORMER_WEIGHTS)
    for k, v in src.state_dict().items():
        assert torch.equal(dst.state_dict()[k], v), k


def test_bad_checkpoints_are_refused_naming_the_file(tmp_path):
    from safetensors.torch import save_file

    model = _tiny()
    path = tmp_path / "w.safetensors"
    sd = {keymap.ours_to_official(k): v.contiguous() for k, v in model.state_dict().items()}
    save_file({**sd, "blocks.0.cross_attn.extra.weight": torch.zeros(2)}, str(path))
    with pytest.raises(BadInputError, match="extra.weight") as err:
        components.load_transformer_weights(model, path)
    assert str(path) in str(err.value)
    save_file({k: v for k, v in sd.items() if "k_audio" not in k}, str(path))
    with pytest.raises(BadInputError, match="lacks"):
        components.load_transformer_weights(model, path)
    save_file({**sd, "head.modulation": torch.zeros(1, 2, 7)}, str(path))
    with pytest.raises(BadInputError, match="shape"):
        components.load_transformer_weights(model, path)
    path.write_bytes(b"not safetensors")
    with pytest.raises(BadInputError, match="readable"):
        components.load_transformer_weights(model, path)


def test_model_folder_check_names_the_missing_file(tmp_path):
    with pytest.raises(BadInputError, match="does not exist"):
        components.check_model_folder(tmp_path / "nope")
    with pytest.raises(BadInputError, match="diffusion_pytorch_model.safetensors"):
        components.check_model_folder(tmp_path)
    (tmp_path / "transformer").mkdir()
    (tmp_path / "transformer" / components.TRANSFORMER_WEIGHTS).write_bytes(b"x")
    with pytest.raises(BadInputError, match="vae/config.json"):
        components.check_model_folder(tmp_path)


def _model_folder(root, monkeypatch):
    """A tiny EchoMimicV3 folder: the transformer under the official names (an original-layout
    config.json beside it) and Wan 2.1 i2v component stand-ins (configs + small safetensors: the
    check reads configs and headers). The loader's audio sizes are the release's, which a tiny
    checkpoint cannot have: they are the tiny preset's here."""
    import dataclasses

    from safetensors.torch import save_file

    release = PRESETS["flash-pro"]
    audio = {k: TINY[k] for k in ("audio_layers", "audio_intermediate_dim", "audio_context_tokens")}
    monkeypatch.setitem(PRESETS, "flash-pro", dataclasses.replace(release, transformer={**release.transformer, **audio}))
    (root / "transformer").mkdir(parents=True)
    _write_official(root / "transformer" / components.TRANSFORMER_WEIGHTS, _tiny())
    official = {"model_type": "i2v", "dim": 24, "num_heads": 2, "ffn_dim": TINY["ffn_dim"], "num_layers": TINY["num_layers"],
                "in_dim": 36, "out_dim": 16, "text_dim": TINY["text_dim"], "freq_dim": TINY["freq_dim"], "eps": 1e-6}  # fmt: skip
    (root / "transformer" / "config.json").write_text(json.dumps(official))
    for sub, cls in (("vae", "AutoencoderKLWan"), ("image_encoder", "CLIPVisionModel"), ("text_encoder", "UMT5EncoderModel")):
        (root / sub).mkdir()
        (root / sub / "config.json").write_text(json.dumps({"_class_name": cls}))
        save_file({"w": torch.zeros(2, 2, dtype=torch.bfloat16)}, str(root / sub / "model.safetensors"))
    for sub, name in (("tokenizer", "tokenizer_config.json"), ("scheduler", "scheduler_config.json")):
        (root / sub).mkdir()
        (root / sub / name).write_text("{}")
    return root


def test_model_check_recognises_the_official_layout(tmp_path, monkeypatch):
    from newsmotion_engine.render.model_check import check_model

    root = _model_folder(tmp_path / "echo", monkeypatch)
    found = check_model(root)
    assert (found.backend, found.layout) == ("echomimic-v3", "EchoMimicV3 transformer + Wan 2.1 i2v components")
    rows = {row[0]: row for row in found.rows}
    assert f"num_layers={TINY['num_layers']}" in rows["transformer"][2] and "F32" in rows["transformer"][3]
    assert rows["vae"][1] == "AutoencoderKLWan" and "BF16" in rows["vae"][3]
    assert found.release.startswith("transformer differs from antgroup/echomimic_v3 flash-pro in dim=24 (released 1536)")
    assert found.defaults == {"segment frames": 81, "steps": 8, "audio CFG": 3.0, "scheduler": "UniPCMultistepScheduler (shift 5.0)"}
    assert found.options == f"--backend echomimic-v3 -o model_path={root} -o speech=ID"


def test_model_check_names_what_an_incomplete_or_wrong_folder_lacks(tmp_path, monkeypatch):
    from safetensors.torch import save_file

    from newsmotion_engine.render.model_check import check_model

    root = _model_folder(tmp_path / "echo", monkeypatch)
    (root / "text_encoder" / "config.json").unlink()
    with pytest.raises(BadInputError, match=r"text_encoder/config.json: missing: the Wan 2.1 i2v components"):
        check_model(root)
    root = _model_folder(tmp_path / "two", monkeypatch)
    weights = root / "transformer" / components.TRANSFORMER_WEIGHTS
    state = {keymap.ours_to_official(k): v.contiguous() for k, v in _tiny().state_dict().items()}
    save_file({k: v for k, v in state.items() if "k_audio" not in k}, str(weights))
    with pytest.raises(BadInputError, match=r"does not fit the EchoMimicV3 transformer of transformer/config.json: \d+ tensor\(s\) missing"):
        check_model(root)
    # A Wan 2.1 i2v diffusers folder without the EchoMimicV3 transformer: told to put it there.
    weights.unlink()
    (root / "model_index.json").write_text(json.dumps({"_class_name": "WanImageToVideoPipeline"}))
    with pytest.raises(BadInputError, match=r"diffusion_pytorch_model.safetensors: missing: put the EchoMimicV3 transformer"):
        check_model(root)
