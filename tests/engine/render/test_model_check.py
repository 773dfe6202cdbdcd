"""The ``newsmotion model check`` registry: each backend or stage declares its folder layout, the
layout that claims a folder most surely checks it, a folder no layout claims is one error listing
what each expects, and weight files are indexed without reading their tensors."""

from __future__ import annotations

import pytest

from newsmotion_engine.errors import BadInputError
from newsmotion_engine.render import model_check as M


def test_every_built_in_backend_with_weights_and_musetalk_declare_a_layout():
    assert set(M.layouts()) == {"wan-animate", "wan-animate-2", "scail-2", "mimicmotion", "echomimic-v3", "champ", "musetalk"}


def test_an_unrelated_folder_or_a_file_is_one_error(tmp_path):
    (tmp_path / "README.md").write_text("not a model")
    (tmp_path / "weights").mkdir()
    (tmp_path / "weights" / "model.bin").write_bytes(b"\0" * 16)
    with pytest.raises(BadInputError, match=r"is no model folder newsmotion knows \(expected wan-animate: .*champ: champ/ .*musetalk: musetalkV15/") as err:
        M.check_model(tmp_path)
    assert "\n" not in str(err.value)
    with pytest.raises(BadInputError, match="is not a folder"):
        M.check_model(tmp_path / "README.md")


def test_the_surest_claim_wins(tmp_path, monkeypatch):
    monkeypatch.setattr(M, "_LAYOUTS", dict(M.layouts()))

    def layout(name, score):
        return M.ModelLayout(expects=name, claims=lambda root: score, check=lambda root: M.ModelCheck(root, name, name))

    M.register_layout("maybe", layout("maybe", M.MAYBE))
    M.register_layout("marked", layout("marked", M.MARKED))
    assert M.check_model(tmp_path).backend == "marked"


def test_tensor_index_reads_torch_files_without_their_data(tmp_path):
    torch = pytest.importorskip("torch")
    torch.save({"state_dict": {"a.weight": torch.zeros(2, 3, dtype=torch.float16), "b": torch.zeros(4, dtype=torch.bfloat16)}},
               tmp_path / "w.pth")  # fmt: skip
    index = M.tensor_index(tmp_path / "w.pth")
    assert index == {"a.weight": ((2, 3), "F16"), "b": ((4,), "BF16")}
    s = M.weights_summary([tmp_path / "w.pth"])
    assert (s["tensors"], s["params"], s["dtypes"]) == (2, 10, {"F16": 6, "BF16": 4})
    (tmp_path / "bad.pth").write_bytes(b"not a checkpoint")
    with pytest.raises(BadInputError, match=r"bad\.pth: is not a readable checkpoint"):
        M.tensor_index(tmp_path / "bad.pth")


def test_fit_problem_names_the_first_unknown_misshaped_or_missing_tensor():
    expected = {"a": (2,), "b": (3, 3), "pos.pe": (1,)}
    index = {"a": ((2,), "F32"), "b": ((3, 3), "F32")}
    assert M.fit_problem(index, expected, optional=("pos.pe",)) is None
    assert M.fit_problem(index, expected) == "1 tensor(s) missing, e.g. 'pos.pe'"
    assert M.fit_problem({**index, "x": ((1,), "F32")}, expected) == "1 tensor(s) the model does not have, e.g. 'x'"
    assert M.fit_problem({"a": ((4,), "F32")}, expected) == "a has shape [4], the model's is [2]"
    assert M.fit_problem({"A": ((2,), "F32")}, {"a": (2,)}, to_ours=str.lower) is None
