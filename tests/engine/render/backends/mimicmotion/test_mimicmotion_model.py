"""mimicmotion's model: the released architecture on the meta device (parameter counts, state-dict
keys and shapes), the PoseNet as the official definition, and loading a user's folder in the
official layout (an SVD-xt-1.1 diffusers folder + ``MimicMotion_1-1.pth``), tested on a tiny random
checkpoint written in that layout."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("diffusers")

pytestmark = pytest.mark.usefixtures("one_torch_thread")

from newsmotion_engine.errors import BadInputError  # noqa: E402
from newsmotion_engine.render import get_backend  # noqa: E402
from newsmotion_engine.render.backends import mimicmotion  # noqa: E402
from newsmotion_engine.render.backends.mimicmotion.config import PRESETS, released_component  # noqa: E402
from newsmotion_engine.render.backends.mimicmotion.pose_net import PoseNet, pose_conditioning  # noqa: E402

mimicmotion.register()


def _official_pose_net_params(width: int) -> int:
    """The official PoseNet's parameters, counted from its definition: (in, out, kernel) per conv."""
    convs = [(3, 3, 3), (3, 16, 4), (16, 16, 3), (16, 32, 4), (32, 32, 3), (32, 64, 4), (64, 64, 3), (64, 128, 3), (128, width, 1)]
    return sum(i * o * k * k + o for i, o, k in convs) + 1  # + the scale


def test_released_architecture_on_the_meta_device():
    from diffusers import AutoencoderKLTemporalDecoder, UNetSpatioTemporalConditionModel
    from transformers import CLIPVisionConfig, CLIPVisionModelWithProjection

    p = PRESETS["svd-xt-1.1"]
    assert p.unet == released_component("unet/config.json") and (p.resolution, p.segment_frames, p.overlap) == (576, 72, 6)
    with torch.device("meta"):
        unet = UNetSpatioTemporalConditionModel.from_config(p.unet)
        vae = AutoencoderKLTemporalDecoder.from_config(p.vae)
        clip = CLIPVisionModelWithProjection(CLIPVisionConfig(**p.image_encoder))
        pose_net = PoseNet(unet.config.block_out_channels[0])
    count = lambda m: sum(x.numel() for x in m.parameters())  # noqa: E731
    # SVD-xt's UNet is 1.52B parameters; the temporal-decoder VAE 97.7M; OpenCLIP ViT-H/14 + projection 632M.
    assert (count(unet), count(vae), count(clip)) == (1_524_623_082, 97_742_847, 632_076_800)
    assert count(pose_net) == _official_pose_net_params(320) == 205_557
    sd = unet.state_dict()
    assert len(sd) == 1428
    shapes = {"conv_in.weight": (320, 8, 3, 3), "add_embedding.linear_1.weight": (1280, 768), "conv_out.weight": (4, 320, 3, 3),
              "down_blocks.0.attentions.0.transformer_blocks.0.attn2.to_k.weight": (320, 1024),
              "down_blocks.0.attentions.0.temporal_transformer_blocks.0.ff.net.0.proj.weight": (2560, 320),
              "mid_block.attentions.0.time_mixer.mix_factor": (1,)}  # fmt: skip
    assert {k: tuple(sd[k].shape) for k in shapes} == shapes
    assert {k: tuple(v.shape) for k, v in pose_net.state_dict().items()} == {
        "scale": (1,), "conv_layers.0.weight": (3, 3, 3, 3), "conv_layers.0.bias": (3,), "conv_layers.2.weight": (16, 3, 4, 4),
        "conv_layers.2.bias": (16,), "conv_layers.4.weight": (16, 16, 3, 3), "conv_layers.4.bias": (16,),
        "conv_layers.6.weight": (32, 16, 4, 4), "conv_layers.6.bias": (32,), "conv_layers.8.weight": (32, 32, 3, 3),
        "conv_layers.8.bias": (32,), "conv_layers.10.weight": (64, 32, 4, 4), "conv_layers.10.bias": (64,),
        "conv_layers.12.weight": (64, 64, 3, 3), "conv_layers.12.bias": (64,), "conv_layers.14.weight": (128, 64, 3, 3),
        "conv_layers.14.bias": (128,), "final_proj.weight": (320, 128, 1, 1), "final_proj.bias": (320,)}  # fmt: skip
    assert tuple(vae.state_dict()["decoder.time_conv_out.weight"].shape) == (3, 3, 3, 1, 1)


def test_pose_net_downsamples_by_eight_and_starts_silent():
    net = PoseNet(32)
    with torch.no_grad():
        out = net(torch.randn(2, 5, 3, 64, 48))  # [B, F, 3, H, W] is flattened as the official forward
    assert out.shape == (10, 32, 8, 6) and float(out.abs().max()) == 0.0  # zero-initialised projection
    assert float(net.scale.detach()) == 2.0


def test_pose_conditioning_adds_to_conv_in_only_inside_the_block():
    conv = torch.nn.Conv2d(4, 8, 3, padding=1)
    model = torch.nn.Module()
    model.conv_in = conv
    x, pose = torch.randn(2, 4, 6, 6), torch.randn(2, 8, 6, 6)
    with pose_conditioning(model, pose):
        assert torch.allclose(model.conv_in(x), conv.forward(x) + pose)
    assert torch.equal(model.conv_in(x), conv.forward(x))
    with pose_conditioning(model, None):
        assert torch.equal(model.conv_in(x), conv.forward(x))


# ----------------------------------------------------------------------------- the official layout
def _tiny_folder(root, suffix=".pth"):
    """A tiny SVD-xt-1.1-layout folder with a MimicMotion checkpoint of random tensors (official keys)."""
    from diffusers import AutoencoderKLTemporalDecoder, UNetSpatioTemporalConditionModel
    from transformers import CLIPVisionConfig, CLIPVisionModelWithProjection

    p = PRESETS["tiny"]
    (root / "unet").mkdir(parents=True)
    (root / "scheduler").mkdir()
    (root / "model_index.json").write_text(json.dumps({"_class_name": "StableVideoDiffusionPipeline"}))
    (root / "unet" / "config.json").write_text(json.dumps({"_class_name": "UNetSpatioTemporalConditionModel", **p.unet}))
    (root / "scheduler" / "scheduler_config.json").write_text(json.dumps({"_class_name": "EulerDiscreteScheduler", **p.scheduler}))
    torch.manual_seed(1)
    AutoencoderKLTemporalDecoder(**p.vae).save_pretrained(root / "vae")
    CLIPVisionModelWithProjection(CLIPVisionConfig(**p.image_encoder)).save_pretrained(root / "image_encoder")
    state = {f"unet.{k}": torch.randn_like(v) for k, v in UNetSpatioTemporalConditionModel(**p.unet).state_dict().items()}
    state.update({f"pose_net.{k}": torch.randn_like(v) for k, v in PoseNet(p.unet["block_out_channels"][0]).state_dict().items()})
    ckpt = root / f"MimicMotion_1-1{suffix}"
    if suffix == ".pth":
        torch.save(state, ckpt)
    else:
        from safetensors.torch import save_file

        save_file(state, str(ckpt))
    return ckpt, state


@pytest.mark.parametrize("suffix", [".pth", ".safetensors"])
def test_official_checkpoint_layout_loads_by_key_map(tmp_path, suffix):
    ckpt, state = _tiny_folder(tmp_path / "svd", suffix)
    kw = {"model_path": str(tmp_path / "svd"), "device": "cpu", "dtype": "float32", "steps": 2}
    if suffix != ".pth":
        kw["checkpoint"] = str(ckpt)
    backend = get_backend("mimicmotion", **kw)
    backend.load()
    comps = backend.components
    assert torch.equal(comps.unet.state_dict()["conv_in.weight"], state["unet.conv_in.weight"])
    assert torch.equal(comps.pose_net.state_dict()["final_proj.weight"], state["pose_net.final_proj.weight"])
    assert all(torch.equal(v, state[f"unet.{k}"]) for k, v in comps.unet.state_dict().items())
    info = backend.describe()
    assert info["weights"].startswith("folder ") and "note" not in info
    assert info["defaults"]["steps"] == 25 and info["defaults"]["resolution"] == 576 and info["defaults"]["overlap"] == 6
    assert backend.options.segment_length == 72
    backend.close()


def test_bad_folder_or_checkpoint_is_one_error_naming_the_file(tmp_path):
    root = tmp_path / "svd"
    ckpt, state = _tiny_folder(root)
    opts = {"model_path": str(root), "device": "cpu", "dtype": "float32"}
    missing = tmp_path / "nope.pth"
    with pytest.raises(BadInputError, match=r"nope\.pth.*MimicMotion checkpoint not found"):
        get_backend("mimicmotion", **opts, checkpoint=str(missing)).load()
    torch.save({k: v for k, v in state.items() if k.startswith("unet.")}, tmp_path / "no_pose.pth")
    with pytest.raises(BadInputError, match=r"no_pose\.pth.*has no pose_net\.\* tensors"):
        get_backend("mimicmotion", **opts, checkpoint=str(tmp_path / "no_pose.pth")).load()
    bad = dict(state)
    bad["unet.conv_in.weight"] = torch.zeros(1)
    torch.save(bad, tmp_path / "bad.pth")
    with pytest.raises(BadInputError, match=r"bad\.pth.*does not fit the UNet"):
        get_backend("mimicmotion", **opts, checkpoint=str(tmp_path / "bad.pth")).load()
    (tmp_path / "junk.pth").write_bytes(b"not a checkpoint")
    with pytest.raises(BadInputError, match=r"junk\.pth.*not a readable checkpoint"):
        get_backend("mimicmotion", **opts, checkpoint=str(tmp_path / "junk.pth")).load()
    (root / "model_index.json").write_text(json.dumps({"_class_name": "WanAnimatePipeline"}))
    with pytest.raises(BadInputError, match="not StableVideoDiffusionPipeline"):
        get_backend("mimicmotion", **opts).load()


def test_model_check_recognises_the_folder_and_names_its_defaults(tmp_path):
    from newsmotion_engine.render.model_check import check_model

    _tiny_folder(tmp_path / "svd")
    found = check_model(tmp_path / "svd")
    assert found.backend == "mimicmotion" and found.layout == "StableVideoDiffusionPipeline"
    assert {row[0] for row in found.rows} >= {"unet", "vae", "image_encoder", "scheduler"}
    # The tiny UNet is not the release: the check says where it differs.
    assert found.release.startswith("unet differs from stabilityai/stable-video-diffusion-img2vid-xt-1-1 in addition_time_embed_dim=8 (released 256)")
    assert found.defaults["segment frames"] == 72 and found.defaults["steps"] == 25 and found.defaults["CFG"] == 2.0
    assert found.defaults["scheduler"] == "EulerDiscreteScheduler"
    # The checkpoint's own row: both parts, checked against the folder's UNet and a PoseNet of its width.
    ckpt_row = {row[0]: row for row in found.rows}["MimicMotion_1-1.pth"]
    assert "PoseNet width 32" in ckpt_row[2] and "F32" in ckpt_row[3]
    assert found.options == f"--backend mimicmotion -o model_path={tmp_path / 'svd'}"


def test_model_check_names_what_an_incomplete_folder_lacks(tmp_path):
    from newsmotion_engine.render.model_check import check_model

    ckpt, state = _tiny_folder(tmp_path / "svd")
    (tmp_path / "svd" / "model_index.json").unlink()  # the checkpoint still marks the folder as MimicMotion's
    with pytest.raises(BadInputError, match=r"model_index\.json: missing from the SVD-xt-1\.1 model folder"):
        check_model(tmp_path / "svd")
    _tiny_folder(tmp_path / "other")
    torch.save({**state, "pose_net.final_proj.weight": torch.zeros(64, 128, 1, 1)}, tmp_path / "other" / ckpt.name)
    with pytest.raises(BadInputError, match=r"MimicMotion_1-1\.pth: pose_net\.\*: does not fit the PoseNet \(width 32.*final_proj\.weight has shape \[64, 128, 1, 1\]"):
        check_model(tmp_path / "other")
