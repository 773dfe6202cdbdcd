"""Regional compile's options (``accel/compile.py``): the GELU rewrite in and out, the regions
compiled in place of the model's repeated blocks, bad values refused."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from newsmotion_engine.accel.compile import Compile, SigmoidTanhGelu, compile_blocks, uncompile_blocks  # noqa: E402
from newsmotion_engine.accel.registry import AccelConfigError  # noqa: E402


class _Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ffn = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(approximate="tanh"), torch.nn.Linear(16, 8))
        self.act = torch.nn.GELU()  # exact GELU: left alone

    def forward(self, x):
        return self.act(self.ffn(x))


class _Model(torch.nn.Module):
    _repeated_blocks = ("_Block",)

    def __init__(self) -> None:
        super().__init__()
        self.blocks = torch.nn.ModuleList([_Block(), _Block()])

    def compile_repeated_blocks(self, **kwargs):  # diffusers' ModelMixin method, without a model class
        for b in self.blocks:
            b.compile(**kwargs)


def test_sigmoid_gelu_is_the_tanh_gelu():
    x = torch.linspace(-12, 12, 20001)
    assert (SigmoidTanhGelu()(x) - torch.nn.functional.gelu(x, approximate="tanh")).abs().max() < 1e-6
    xb = x.to(torch.bfloat16)
    assert SigmoidTanhGelu()(xb).dtype == torch.bfloat16


def test_gelu_rewrite_is_applied_reported_and_undone():
    model = _Model()
    report = compile_blocks(model, Compile(fullgraph=False, gelu="sigmoid"))  # lazy: nothing compiles here
    assert report["gelu"] == "sigmoid" and report["gelu_modules"] == 2 and report["tuned"] is False
    assert all(isinstance(b.ffn[1], SigmoidTanhGelu) and isinstance(b.act, torch.nn.GELU) for b in model.blocks)
    uncompile_blocks(model)
    assert all(type(b.ffn[1]) is torch.nn.GELU for b in model.blocks)
    assert compile_blocks(model, Compile(fullgraph=False))["gelu_modules"] == 0
    uncompile_blocks(model)


def test_bad_values_are_refused():
    with pytest.raises(AccelConfigError, match="gelu"):
        Compile(gelu="fast")
    with pytest.raises(AccelConfigError, match="tuned"):
        Compile(tuned="yes")
    for bad in (["ResnetBlock2D"], ("",), (3,)):
        with pytest.raises(AccelConfigError, match="regions"):
            Compile(regions=bad)


def test_regions_compile_the_named_classes_and_leave_the_models_own_list():
    """``Compile(regions=...)`` compiles the sub-modules of those classes (diffusers'
    compile_repeated_blocks on a real ModelMixin), reports them, and the model's own
    ``_repeated_blocks`` (its class's here) is what a plain Compile compiles afterwards."""
    diffusers = pytest.importorskip("diffusers")
    from newsmotion_engine.accel.compile import compiled_block_count

    unet = diffusers.UNet2DConditionModel(
        block_out_channels=(8, 16), layers_per_block=1, norm_num_groups=4, cross_attention_dim=8, attention_head_dim=2,
        down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"), up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
        sample_size=8)  # fmt: skip
    resnets = sum(type(m).__name__ == "ResnetBlock2D" for m in unet.modules())
    blocks = sum(type(m).__name__ == "BasicTransformerBlock" for m in unet.modules())
    assert resnets > blocks > 0
    report = compile_blocks(unet, Compile(fullgraph=False, regions=("ResnetBlock2D",)))  # lazy: nothing compiles here
    assert report["regions"] == ["ResnetBlock2D"] and compiled_block_count(unet) == resnets
    assert "_repeated_blocks" not in vars(unet) and unet._repeated_blocks == ["BasicTransformerBlock"]
    uncompile_blocks(unet)
    assert compile_blocks(unet, Compile(fullgraph=False))["regions"] == ["BasicTransformerBlock"]
    assert compiled_block_count(unet) == blocks
    uncompile_blocks(unet)
    unet._repeated_blocks = ["Transformer2DModel"]  # a backend's own list, set at load, comes back too
    compile_blocks(unet, Compile(fullgraph=False, regions=("ResnetBlock2D",)))
    assert vars(unet)["_repeated_blocks"] == ["Transformer2DModel"]
    uncompile_blocks(unet)
    with pytest.raises(AccelConfigError, match="NoSuchBlock"):  # a name the model does not hold: said, nothing compiled
        compile_blocks(unet, Compile(fullgraph=False, regions=("NoSuchBlock",)))
    assert compiled_block_count(unet) == 0
