"""``newsmotion model check DIR``: a checkpoint folder built from the released configs with tiny
stand-in weight files is recognized per backend (classes, configs, safetensors headers, the
defaults it implies); a missing file or a wrong class is one error naming it."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors.torch import save_file

from newsmotion_engine.cli import main
from newsmotion_engine.errors import BadInputError
from newsmotion_engine.render.model_check import check_model, weights_summary
from newsmotion_engine.render.backends.wan.released import released_dir


def make_checkpoint(tmp_path, backend):
    """The released configs plus small bf16 safetensors files (stand-ins: the headers are what is read)."""
    root = tmp_path / backend
    shutil.copytree(released_dir(backend), root)
    (root / "tokenizer").mkdir()
    (root / "tokenizer" / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "T5Tokenizer"}))
    if backend == "wan-animate":
        (root / "image_processor").mkdir()
        (root / "image_processor" / "preprocessor_config.json").write_text(json.dumps({"image_processor_type": "CLIPImageProcessor"}))
    for sub in ("transformer", "vae", "image_encoder", "text_encoder"):
        save_file({"a.weight": torch.zeros(3, 4, dtype=torch.bfloat16), "b.bias": torch.zeros(5, dtype=torch.float32)},
                  str(root / sub / "diffusion_pytorch_model.safetensors"))  # fmt: skip
    return root


def run(capsys, *argv):
    with pytest.raises(SystemExit) as exit_info:
        main(list(argv))
    out, err = capsys.readouterr()
    return exit_info.value.code, out, err


@pytest.mark.parametrize(("backend", "pipeline", "transformer", "scheduler"), [
    ("wan-animate", "WanAnimatePipeline", "WanAnimateTransformer3DModel", "UniPCMultistepScheduler (shift 5.0)"),
    ("wan-animate-2", "WanAnimate2ModularPipeline", "WanAnimate2Transformer3DModel", "FlowMatchEulerDiscreteScheduler (shift 5.0)"),
])  # fmt: skip
def test_released_layout_is_recognized(tmp_path, backend, pipeline, transformer, scheduler):
    found = check_model(make_checkpoint(tmp_path, backend))
    assert (found.backend, found.layout) == (backend, pipeline)
    rows = {r[0]: r for r in found.rows}
    assert rows["transformer"][1] == transformer and "num_layers=40" in rows["transformer"][2]
    assert rows["text_encoder"][1] == "UMT5EncoderModel"
    assert "2 tensors" in rows["vae"][3] and "BF16 71%" in rows["vae"][3]  # 12 of 17 values are bf16
    assert found.release.startswith("transformer config matches Wan-AI/")
    assert found.defaults["scheduler"] == scheduler
    assert found.defaults["segment frames"] >= 77 and found.defaults["steps"] >= 10


def test_weights_summary_reads_headers(tmp_path):
    save_file({"w": torch.zeros(2, 3, dtype=torch.float16)}, str(tmp_path / "x.safetensors"))
    s = weights_summary([tmp_path / "x.safetensors"])
    assert (s["tensors"], s["params"], s["dtypes"]) == (1, 6, {"F16": 6})
    (tmp_path / "bad.safetensors").write_bytes(b"\xff" * 16)
    with pytest.raises(BadInputError, match="bad.safetensors.*not a safetensors"):
        weights_summary([tmp_path / "bad.safetensors"])


def test_unusable_folders_name_the_problem(tmp_path):
    root = make_checkpoint(tmp_path, "wan-animate")
    (root / "vae" / "config.json").unlink()
    with pytest.raises(BadInputError, match="vae/config.json"):
        check_model(root)
    root = make_checkpoint(tmp_path / "b", "wan-animate")
    (root / "model_index.json").write_text(json.dumps({"_class_name": "WanPipeline"}))
    with pytest.raises(BadInputError, match="model_index.json.*'WanPipeline'"):
        check_model(root)
    root = make_checkpoint(tmp_path / "c", "wan-animate-2")
    cfg = json.loads((root / "transformer" / "config.json").read_text())
    (root / "transformer" / "config.json").write_text(json.dumps({**cfg, "_class_name": "WanTransformer3DModel"}))
    with pytest.raises(BadInputError, match="transformer/config.json.*WanTransformer3DModel"):
        check_model(root)
    with pytest.raises(BadInputError, match="model_index.json"):
        check_model(tmp_path)


def test_cli_table_and_error_line(tmp_path, capsys):
    root = make_checkpoint(tmp_path, "wan-animate-2")
    code, out, _ = run(capsys, "model", "check", str(root))
    assert code == 0 and "wan-animate-2" in out and "WanAnimate2Transformer3DModel" in out and "segment frames" in out
    shutil.rmtree(root / "text_encoder")
    code, out, err = run(capsys, "model", "check", str(root))
    assert code == 1 and err.startswith("error:") and "text_encoder" in err and len(err.strip().splitlines()) == 1
