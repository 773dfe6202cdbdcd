"""champ's models: the released architecture on the meta device (parameter counts checked against
independent figures, state-dict keys in the official layout), the official checkpoint folder
loaded through the key map (a tiny random checkpoint written in that layout), the context-window
schedule, and the reference attention's conditional / unconditional rows (our single reference
pass against the official order of work: the same latents)."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("diffusers")

from newsmotion_engine.errors import BadInputError  # noqa: E402
from newsmotion_engine.render.backends.champ.components import build_models, load_components, official_to_diffusers  # noqa: E402
from newsmotion_engine.render.backends.champ.config import PRESETS, ChampOptions  # noqa: E402
from newsmotion_engine.render.backends.champ.denoise import context_windows  # noqa: E402


def _motion_module(c: int) -> int:
    """One AnimateDiff temporal module of width c: GroupNorm, proj_in/out, one block of two
    self-attentions (q, k, v without bias) + GEGLU feed-forward (x4) + three LayerNorms."""
    return 2 * c + 2 * (c * c + c) + 3 * 2 * c + 2 * (4 * c * c + c) + (c * 8 * c + 8 * c) + (4 * c * c + c)


def _transformer(c: int) -> int:
    """A spatial transformer without cross-attention (the guidance encoder's)."""
    return 2 * c + 2 * (c * c + c) + 2 * 2 * c + (4 * c * c + c) + (c * 8 * c + 8 * c) + (4 * c * c + c)


def _guidance_encoder(widths=(16, 32, 96, 256), out=320) -> int:
    conv = lambda i, o: i * o * 9 + o  # noqa: E731
    n = conv(3, widths[0]) + conv(widths[-1], out) + _transformer(widths[-1])
    for a, b in zip(widths[:-1], widths[1:]):
        n += conv(a, a) + conv(a, b) + _transformer(a) + _transformer(b)
    return n


def _to_official(key: str) -> list[str]:
    """diffusers UNetMotionModel key -> the official (AnimateDiff) names."""
    if ".motion_modules." not in key:
        return [key]
    head, tail = key.split(".motion_modules.", 1)
    idx, rest = tail.split(".", 1)
    for new, old in ((".attn1.", ".attention_blocks.0."), (".attn2.", ".attention_blocks.1."), (".norm1.", ".norms.0."),
                     (".norm2.", ".norms.1."), (".norm3.", ".ff_norm.")):  # fmt: skip
        rest = ("." + rest).replace(new, old)[1:]
    base = f"{head}.motion_modules.{idx}.temporal_transformer.{rest}"
    if base.endswith(".pos_embed.pe"):
        stem = base[: -len("pos_embed.pe")]
        return [stem + "attention_blocks.0.pos_encoder.pe", stem + "attention_blocks.1.pos_encoder.pe"]
    return [base]


def test_released_architecture_on_meta_device():
    with torch.device("meta"):
        m = build_models(PRESETS["champ"]())
    count = lambda mod: sum(p.numel() for p in mod.parameters())  # noqa: E731
    sd15 = 859_520_964  # SD1.5's UNet, the published figure
    assert count(m["reference_unet"]) == sd15
    motion = 5 * _motion_module(320) + 5 * _motion_module(640) + 11 * _motion_module(1280)  # 2+3 per level, mid block
    assert motion == 453_209_280  # AnimateDiff v2's motion module
    assert count(m["denoising_unet"]) == sd15 + motion
    assert count(m["guidance_encoders"]) == 4 * _guidance_encoder()
    assert sorted(m["guidance_encoders"]) == ["depth", "dwpose", "normal", "semantic_map"]
    assert count(m["vae"]) == 83_653_863  # sd-vae-ft-mse
    assert count(m["image_encoder"]) == 303_179_776 + 1024 * 768  # CLIP ViT-L/14 vision tower + projection
    # The official denoising UNet's keys map onto ours one to one (the second positional table is dropped).
    ours = {k: tuple(v.shape) for k, v in m["denoising_unet"].state_dict().items()}
    official = {o: shape for k, shape in ours.items() for o in _to_official(k)}
    assert "down_blocks.0.motion_modules.0.temporal_transformer.transformer_blocks.0.attention_blocks.1.to_q.weight" in official
    assert official["mid_block.motion_modules.0.temporal_transformer.transformer_blocks.0.attention_blocks.0.pos_encoder.pe"] == (1, 32, 1280)
    assert official["up_blocks.3.motion_modules.2.temporal_transformer.transformer_blocks.0.ff_norm.weight"] == (320,)
    mapped = official_to_diffusers(dict.fromkeys(official, 0))
    assert set(mapped) == set(ours)
    enc = {k: tuple(v.shape) for k, v in m["guidance_encoders"]["depth"].state_dict().items()}
    assert enc["conv_out.weight"] == (320, 256, 3, 3) and enc["attentions.5.transformer_blocks.0.attn1.to_q.weight"] == (256, 256)
    assert enc["attentions.0.norm.weight"] == (16,) and "guidance_attention.proj_out.weight" in enc


def _write_official_folder(root, models):
    """The tiny models written in the official pretrained_models/ layout."""
    from safetensors.torch import save_file

    (root / "stable-diffusion-v1-5" / "unet").mkdir(parents=True)
    unet_cfg = dict(models["reference_unet"].config)
    (root / "stable-diffusion-v1-5" / "unet" / "config.json").write_text(json.dumps({k: v for k, v in unet_cfg.items() if not k.startswith("_")} | {"_class_name": "UNet2DConditionModel"}))
    models["vae"].save_pretrained(root / "sd-vae-ft-mse")
    models["image_encoder"].save_pretrained(root / "image_encoder")
    champ = root / "champ"
    champ.mkdir()
    official = {o: v for k, v in models["denoising_unet"].state_dict().items() for o in _to_official(k)}
    motion = {k: v for k, v in official.items() if ".motion_modules." in k}
    # SD1.5's UNet weights: what the official code starts both UNets from. Here they hold the
    # denoiser's conv_out.bias, which denoising_unet.pth then lacks (strict=False fills it from there).
    base = {k: torch.zeros_like(v) for k, v in models["reference_unet"].state_dict().items()}
    base["conv_out.bias"] = official["conv_out.bias"]
    torch.save(base, root / "stable-diffusion-v1-5" / "unet" / "diffusion_pytorch_model.bin")
    den = {k: v for k, v in official.items() if k not in motion and k != "conv_out.bias"}
    # A temporal key in both files: denoising_unet.pth, loaded last, wins.
    key = next(k for k in motion if k.endswith("proj_out.weight"))
    den[key] = motion[key]
    torch.save(den, champ / "denoising_unet.pth")
    torch.save({**motion, key: torch.zeros_like(motion[key])}, champ / "motion_module.pth")
    torch.save(models["reference_unet"].state_dict(), champ / "reference_unet.pth")
    for t, enc in models["guidance_encoders"].items():
        save_file({k: v.contiguous() for k, v in enc.state_dict().items()}, str(champ / f"guidance_encoder_{t}.safetensors"))


def _tiny_official_folder(root):
    """Tiny random models (guidance encoders and motion modules with the released head counts and
    groups, which the official code hard-codes) written in the official layout; the models."""
    preset = PRESETS["tiny"]()
    preset.guidance_encoder.update(block_out_channels=[8, 32, 32, 32], attention_num_heads=8, norm_num_groups=32)
    preset.motion_module.update(num_attention_heads=8)
    with torch.random.fork_rng():
        torch.manual_seed(123)
        src = build_models(preset)
        for enc in src["guidance_encoders"].values():  # the zero-initialised conv_out, made non-zero
            torch.nn.init.normal_(enc.conv_out.weight)
    _write_official_folder(root, src)
    return src


def test_official_checkpoint_folder_loads_through_the_key_map(tmp_path, smpl_npz):
    src = _tiny_official_folder(tmp_path / "pretrained_models")
    comps = load_components(ChampOptions(model_path=str(tmp_path / "pretrained_models"), smpl_model=str(smpl_npz), device="cpu", dtype="float32"))
    assert comps.weights_label.startswith("folder ") and comps.identity["weights"] == "folder"
    for name, ours in (("denoising_unet", comps.transformer), ("reference_unet", comps.reference_unet), ("vae", comps.vae),
                       ("image_encoder", comps.image_encoder)):  # fmt: skip
        want = src[name].state_dict()
        for k, v in ours.state_dict().items():
            assert torch.equal(v, want[k]), (name, k)
    for t, enc in comps.guidance_encoders.items():
        assert torch.equal(enc.conv_out.weight, src["guidance_encoders"][t].conv_out.weight)
    # A file that does not match is named: an unknown key, or (without SD1.5's weights to fall back on) a missing one.
    root = tmp_path / "pretrained_models"
    state = torch.load(root / "champ" / "reference_unet.pth")
    torch.save({**state, "bogus.weight": torch.zeros(1)}, root / "champ" / "reference_unet.pth")
    with pytest.raises(BadInputError, match=r"reference_unet\.pth.*unexpected bogus\.weight"):
        load_components(ChampOptions(model_path=str(root), smpl_model=str(smpl_npz), device="cpu", dtype="float32"))
    (root / "stable-diffusion-v1-5" / "unet" / "diffusion_pytorch_model.bin").unlink()
    with pytest.raises(BadInputError, match=r"denoising_unet\.pth.*missing conv_out\.bias"):
        load_components(ChampOptions(model_path=str(root), smpl_model=str(smpl_npz), device="cpu", dtype="float32"))
    (tmp_path / "pretrained_models" / "champ" / "motion_module.pth").unlink()
    with pytest.raises(BadInputError, match=r"motion_module\.pth: missing from the Champ model folder"):
        load_components(ChampOptions(model_path=str(tmp_path / "pretrained_models"), smpl_model=str(smpl_npz), device="cpu", dtype="float32"))


def test_model_check_recognises_the_official_folder_and_names_what_is_wrong(tmp_path):
    from newsmotion_engine.render.model_check import check_model

    root = tmp_path / "pretrained_models"
    _tiny_official_folder(root)
    found = check_model(root)
    assert (found.backend, found.layout) == ("champ", "Champ, official layout")
    rows = {row[0]: row for row in found.rows}
    assert set(rows) >= {"champ/denoising_unet.pth", "champ/motion_module.pth", "champ/reference_unet.pth",
                         "champ/guidance_encoder_dwpose.safetensors", "sd-vae-ft-mse", "image_encoder",
                         "stable-diffusion-v1-5/unet/config.json"}  # fmt: skip
    assert "in / out channels [8, 32]" in rows["champ/guidance_encoder_depth.safetensors"][2]
    assert rows["champ/motion_module.pth"][1] == "AnimateDiff v2 motion modules" and "F32" in rows["champ/motion_module.pth"][3]
    assert found.release.startswith("unet differs from fudan-generative-vision/champ (SD1.5 UNet) in ")
    assert found.defaults["steps"] == 20 and found.defaults["CFG"] == 3.5
    assert f"-o model_path={root} -o smpl_model=SMPL.pkl (required" in found.options
    state = torch.load(root / "champ" / "reference_unet.pth")
    torch.save({**state, "bogus.weight": torch.zeros(1)}, root / "champ" / "reference_unet.pth")
    with pytest.raises(BadInputError, match=r"reference_unet\.pth: does not fit the reference UNet of the folder's configs: 1 tensor\(s\) the model does not have, e\.g\. 'bogus\.weight'"):
        check_model(root)
    (root / "champ" / "motion_module.pth").unlink()
    (root / "champ" / "guidance_encoder_dwpose.safetensors").unlink()
    with pytest.raises(BadInputError, match=r"champ/motion_module\.pth: missing from the Champ folder .*\(and 1 more: guidance_encoder_dwpose\.pth\)"):
        check_model(root)


def test_context_windows_are_the_official_uniform_schedule():
    # pipelines/context.py uniform(step=0, stride 1, closed loop): starts every 24 - 4 = 20 frames, wrapping.
    w = context_windows(120, 24, 4)
    assert [x[0] for x in w] == [0, 20, 40, 60, 80, 100] and all(len(x) == 24 for x in w)
    assert w[-1] == list(range(100, 120)) + [0, 1, 2, 3]
    assert context_windows(13, 24, 4) == [list(range(13))]
    assert context_windows(13, 8, 2) == [list(range(0, 8)), list(range(6, 13)) + [0], [12, 0, 1, 2, 3, 4, 5, 6]]


def test_reference_attention_conditions_only_the_conditional_rows(smpl_npz):
    from newsmotion_engine.render.backends.champ.denoise import sample_latents

    comps = load_components(ChampOptions(smpl_model=str(smpl_npz), device="cpu", dtype="float32"))
    fea = torch.zeros(3, 32, 4, 4)
    ref_a, ref_b = torch.randn(1, 4, 4, 4), torch.randn(1, 4, 4, 4)
    emb = torch.randn(1, 1, 16)
    run = lambda ref, official=False: sample_latents(comps, fea, ref, emb, steps=2, guidance_scale=3.5, context=24,  # noqa: E731
                                                     overlap=4, seed=0, official_reference=official)
    # Our order of work (one reference pass, unconditional rows once) gives the official pipeline's
    # result, and the reference reaches the denoiser.
    ours, official = run(ref_a), run(ref_a, official=True)
    torch.testing.assert_close(ours, official, rtol=1e-5, atol=1e-5)
    assert not torch.allclose(ours, run(ref_b))
    # Under CFG the leading (unconditional) rows attend over their own tokens only, the others over theirs + the bank.
    from newsmotion_engine.render.backends.champ.modules import ReferenceReader, ReferenceState

    state = ReferenceState(frames=2, uncond_rows=2)
    attn = comps.transformer.down_blocks[0].attentions[0].transformer_blocks[0].attn1
    hs = torch.randn(4, 6, attn.to_q.in_features)
    state.bank["x"] = torch.randn(1, 5, attn.to_q.in_features)
    reader = ReferenceReader("x", state)
    out1 = reader(attn, hs)
    state.bank["x"] = torch.randn(1, 5, attn.to_q.in_features)
    out2 = reader(attn, hs)
    assert torch.equal(out1[:2], out2[:2]) and not torch.allclose(out1[2:], out2[2:])


def test_reference_preprocessing_is_the_official_pipelines(smpl_npz):
    """pipeline_aggregation.py: CLIPImageProcessor on the image resized to 224 x 224 (PIL default),
    VaeImageProcessor(vae_scale_factor=8).preprocess(image, height, width) for the VAE."""
    import numpy as np
    from diffusers.image_processor import VaeImageProcessor
    from PIL import Image
    from transformers import CLIPImageProcessor

    from newsmotion_engine.render.backends.champ.denoise import encode_reference

    comps = load_components(ChampOptions(smpl_model=str(smpl_npz), device="cpu", dtype="float32"))
    seen = {}
    vae_encode, clip_forward = comps.vae.encode, comps.image_encoder.forward
    comps.vae.encode = lambda x, *a, **k: (seen.setdefault("vae", x), vae_encode(x, *a, **k))[1]
    comps.image_encoder.forward = lambda x, *a, **k: (seen.setdefault("clip", x), clip_forward(x, *a, **k))[1]
    frame = np.random.default_rng(0).integers(0, 256, (256, 144, 3), dtype=np.uint8)
    encode_reference(comps, frame, 64, 112)
    image = Image.fromarray(frame)
    clip_official = CLIPImageProcessor().preprocess(image.resize((224, 224)), return_tensors="pt").pixel_values
    vae_official = VaeImageProcessor(vae_scale_factor=8, do_convert_rgb=True).preprocess(image, height=112, width=64)
    torch.testing.assert_close(seen["clip"], clip_official, rtol=0, atol=1e-5)
    torch.testing.assert_close(seen["vae"], vae_official, rtol=0, atol=1e-5)
