"""Regional compile's options (``accel/compile.py``): the GELU rewrite in and out, bad values refused."""

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
