"""What ``newsmotion model check DIR`` reads of SCAIL-2's own files, beside the diffusers check
of the folder: ``transformer/config.json`` naming the official DiT class marks the folder as this
backend's (so a converted checkpoint without its ``model_index.json`` is told so), and the DiT's
safetensors, under the official key names, are checked against the model that config builds
(on the meta device, from the headers: no weights loaded), as the loader maps them."""

from __future__ import annotations

from pathlib import Path

from newsmotion_engine.errors import BadInputError
from newsmotion_engine.render.backends.scail_2.components import TRANSFORMER_CLASS
from newsmotion_engine.render.backends.wan.diffusers_config import read_json
from newsmotion_engine.render.model_check import Row, fit_problem, meta_shapes, tensor_index

__all__ = ["has_official_transformer", "transformer_rows"]


def has_official_transformer(root: Path) -> bool:
    """Whether ``root/transformer/config.json`` names the official SCAIL-2 DiT class."""
    config = root / "transformer" / "config.json"
    try:
        return config.is_file() and read_json(config).get("_class_name") == TRANSFORMER_CLASS
    except BadInputError:
        return False


def transformer_rows(root: Path) -> list[Row]:
    """The official key names' row; :class:`BadInputError` naming the folder when a tensor is not
    a parameter of the config's DiT, has another shape, or is missing."""
    from newsmotion_engine.render.backends.scail_2.released import official_kwargs
    from newsmotion_engine.render.backends.scail_2.transformer import SCAIL2Transformer3DModel, official_to_ours

    folder = root / "transformer"
    config_file = folder / "config.json"
    kwargs = official_kwargs(read_json(config_file))
    try:
        expected = meta_shapes(lambda: SCAIL2Transformer3DModel(**kwargs))
    except TypeError as exc:
        raise BadInputError(config_file, f"is not a SCAIL-2 config ({exc})") from None
    index = {name: entry for f in sorted(folder.glob("*.safetensors")) for name, entry in tensor_index(f).items()}
    if problem := fit_problem(index, expected, to_ours=official_to_ours):
        raise BadInputError(folder, f"does not fit the SCAIL-2 DiT of config.json: {problem}")
    return [("transformer keys", "official SCAIL-2 names", f"all {len(index)} tensors map onto SCAIL2Transformer3DModel", "")]
