"""Whether a folder holds a usable model, for which backend or stage, and what it implies
(``newsmotion model check DIR``).

Every model declares its own folder layout (:func:`register_layout`, keyed by the backend or stage
it serves, as :func:`~newsmotion_engine.render.base.register_backend` keys backends): a cheap
``claims`` — how surely a folder is this layout, from marker files alone (:data:`NOT_MINE`,
:data:`MAYBE`: a pipeline folder of a kind it might be, :data:`INDEXED`: its index names this
layout's pipeline, :data:`MARKED`: it holds a file only this layout has) — and a ``check`` that
reads the folder's small files and the weight files' indexes and returns a :class:`ModelCheck`,
or raises :class:`~newsmotion_engine.errors.BadInputError` naming the first missing or wrong file.
:func:`check_model` runs the check of the layout that claims the folder most surely. The built-in
layouts register with their backends (``newsmotion_engine.render``) and with the stages of
:data:`STAGES`.

No weights are loaded: a safetensors file's header gives its tensors' names, shapes and dtypes; a
torch file (``.pth`` / ``.bin`` / ``.pt``) is unpickled with its storages memory-mapped, so only
the pickle is read (:func:`tensor_index`).

Example::

    found = check_model("/models/MuseTalk")
    found.backend, found.layout, found.options   # "musetalk", "MuseTalk 1.5 (official layout)", "newsmotion lips ... -o model_path=..."
"""

from __future__ import annotations

import importlib
import json
import struct
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from newsmotion_engine.errors import BadInputError

__all__ = ["INDEXED", "MARKED", "MAYBE", "NOT_MINE", "STAGES", "ModelCheck", "ModelLayout", "Row", "check_model", "compare_config",
           "component_row", "config_text", "fit_problem", "layouts", "meta_shapes", "register_layout", "require_files", "tensor_index", "torch_state_dict", "weights_summary",
           "weights_text"]  # fmt: skip

NOT_MINE, MAYBE, INDEXED, MARKED = 0, 1, 2, 3
# Models that are no backend but have a folder to check: each module has a ``register()``.
STAGES = ("newsmotion_engine.render.musetalk.model_check",)

Row = tuple[str, str, str, str]  # component (a folder or file), class, config values, weights


@dataclass
class ModelCheck:
    """What :func:`check_model` found: the backend (or stage) the folder is for, the layout it was
    recognised as (a pipeline class, or an official layout's name), one :data:`Row` per component,
    the denoiser compared with the release, the defaults a run with this folder uses, and the
    options that use it."""

    path: Path
    backend: str
    layout: str
    rows: list[Row] = field(default_factory=list)
    release: str = ""
    defaults: dict[str, Any] = field(default_factory=dict)
    options: str = ""


@dataclass(frozen=True)
class ModelLayout:
    """One model's folder layout: ``expects`` (one line: its marker files, shown when no layout
    claims a folder), ``claims(root)`` (:data:`NOT_MINE` .. :data:`MARKED`; cheap, and true for an
    incomplete folder too, so that its check can say what is missing) and ``check(root)``."""

    expects: str
    claims: Callable[[Path], int]
    check: Callable[[Path], ModelCheck]


# backend or stage -> its layout (filled by the backends' register() and the STAGES modules)
_LAYOUTS: dict[str, ModelLayout] = {}


def register_layout(name: str, layout: ModelLayout) -> None:
    """Let :func:`check_model` recognise ``name``'s folders (idempotent: a second call replaces)."""
    _LAYOUTS[name] = layout


def layouts() -> dict[str, ModelLayout]:
    """Every registered layout, the built-in ones included."""
    import newsmotion_engine.render  # noqa: F401  (registers the built-in backends, and with them their layouts)

    for module in STAGES:
        importlib.import_module(module).register()
    return dict(_LAYOUTS)


def check_model(path: str | Path) -> ModelCheck:
    """Check ``path`` as a model folder; see the module docstring.

    Raises:
        BadInputError: not a folder, a folder no layout claims (the message lists what each
            expects), or the claiming layout's check failed (naming the missing or wrong file).
    """
    root = Path(path)
    if not root.is_dir():
        raise BadInputError(root, "is not a folder (give a model checkpoint folder)")
    known = layouts()
    score, name = max(((layout.claims(root), name) for name, layout in known.items()), key=lambda c: c[0])
    if score == NOT_MINE:
        expected = "; ".join(f"{n}: {layout.expects}" for n, layout in known.items())
        raise BadInputError(root, f"is no model folder newsmotion knows (expected {expected})")
    return known[name].check(root)


def require_files(root: Path, relative: Iterable[str], what: str) -> None:
    """:class:`BadInputError` naming the first of ``relative`` missing under ``root`` (and how many
    more are), as part of ``what`` (e.g. ``"the Champ folder"``)."""
    missing = [rel for rel in relative if not (root / rel).is_file()]
    if missing:
        more = f" (and {len(missing) - 1} more: {', '.join(missing[1:])})" if len(missing) > 1 else ""
        raise BadInputError(root / missing[0], f"missing from {what}{more}")


# ----------------------------------------------------------------------------- weight files
_TORCH_DTYPES = {"float64": "F64", "float32": "F32", "float16": "F16", "bfloat16": "BF16", "int64": "I64", "int32": "I32",
                 "int16": "I16", "int8": "I8", "uint8": "U8", "bool": "BOOL", "float8_e4m3fn": "F8_E4M3", "float8_e5m2": "F8_E5M2"}  # fmt: skip
TensorIndex = dict[str, tuple[tuple[int, ...], str]]  # tensor name -> (shape, dtype as safetensors names it)


def _safetensors_index(path: Path) -> TensorIndex:
    try:
        with path.open("rb") as fh:
            (n,) = struct.unpack("<Q", fh.read(8))
            if n > 100_000_000:
                raise ValueError(f"a {n}-byte header")
            header = json.loads(fh.read(n))
    except (OSError, ValueError, struct.error) as exc:
        raise BadInputError(path, f"is not a safetensors file (header unreadable: {exc})") from None
    return {name: (tuple(info["shape"]), info["dtype"]) for name, info in header.items() if name != "__metadata__"}


def torch_state_dict(path: Path, *, mmap: bool = False) -> Mapping[str, Any]:
    """The state dict of a torch weights file (``torch.load(weights_only=True)``: tensors only, no
    code), unwrapped from a ``state_dict`` key. ``mmap``: storages memory-mapped, so only the
    pickle is read (a pre-1.6 file, which cannot be mapped, is read whole). Raises
    :class:`BadInputError` naming a file that cannot be read or holds no state dict."""
    import torch

    try:
        try:
            state = torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
        except RuntimeError as exc:
            if not mmap or "mmap" not in str(exc):
                raise
            state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # any reader failure is the file's problem: one message naming it
        raise BadInputError(path, f"is not a readable checkpoint ({type(exc).__name__}: {exc})") from None
    if isinstance(state, Mapping) and isinstance(state.get("state_dict"), Mapping):
        state = state["state_dict"]
    if not isinstance(state, Mapping):
        raise BadInputError(path, "holds no state dict")
    return state


def _torch_index(path: Path) -> TensorIndex:
    import torch

    return {k: (tuple(v.shape), _TORCH_DTYPES.get(str(v.dtype).removeprefix("torch."), str(v.dtype)))
            for k, v in torch_state_dict(path, mmap=True).items() if isinstance(v, torch.Tensor)}  # fmt: skip


def tensor_index(path: Path) -> TensorIndex:
    """Name -> (shape, dtype) of every tensor of a weights file (safetensors, or a torch file's
    state dict, unwrapped from a ``state_dict`` key), without reading the weights.
    :class:`BadInputError` naming a file that cannot be read."""
    return _safetensors_index(path) if path.suffix == ".safetensors" else _torch_index(path)


def weights_summary(files: list[Path], indexes: list[TensorIndex] | None = None) -> dict[str, Any]:
    """Files, tensors, parameters, parameters per dtype and bytes of weight files (their
    :func:`tensor_index`, or the ``indexes`` already read)."""
    tensors = params = size = 0
    dtypes: dict[str, int] = {}
    for f, index in zip(files, indexes or [tensor_index(f) for f in files]):
        for shape, dtype in index.values():
            count = 1
            for d in shape:
                count *= d
            tensors += 1
            params += count
            dtypes[dtype] = dtypes.get(dtype, 0) + count
        size += f.stat().st_size
    return {"files": len(files), "tensors": tensors, "params": params, "dtypes": dtypes, "bytes": size}


def weights_text(files: list[Path], indexes: list[TensorIndex] | None = None) -> str:
    """:func:`weights_summary` as one cell: files, tensors, parameters, dtype shares, GiB."""
    s = weights_summary(files, indexes)
    dtypes = ", ".join(f"{k} {v / s['params']:.0%}" if len(s["dtypes"]) > 1 else k for k, v in sorted(s["dtypes"].items()))
    return f"{s['files']} file(s), {s['tensors']} tensors, {s['params'] / 1e9:.3f}B params, {dtypes}, {s['bytes'] / 2**30:.2f} GiB"


def meta_shapes(build: Callable[[], Any]) -> dict[str, tuple[int, ...]]:
    """Name -> shape of the state dict of the module ``build()`` makes, built on the meta device
    (no memory, no weights): what a checkpoint must hold to load into it."""
    import torch

    with torch.device("meta"):
        module = build()
    return {k: tuple(v.shape) for k, v in module.state_dict().items()}


def fit_problem(index: Mapping[str, tuple[tuple[int, ...], str]], expected: Mapping[str, tuple[int, ...]], *,
                to_ours: Callable[[str], str | None] | None = None, optional: tuple[str, ...] = ()) -> str | None:  # fmt: skip
    """What keeps the tensors of ``index`` (:func:`tensor_index`, names mapped by ``to_ours``) from
    loading strictly into a model with ``expected`` shapes: a name the model does not have, a shape
    that differs, or tensors missing (those ending in one of ``optional`` may be); None when they fit."""
    found: set[str] = set()
    for name, (shape, _) in index.items():
        ours = to_ours(name) if to_ours else name
        if ours not in expected:
            unknown = sum(1 for n in index if (to_ours(n) if to_ours else n) not in expected)
            return f"{unknown} tensor(s) the model does not have, e.g. {name!r}"
        if tuple(shape) != tuple(expected[ours]):
            return f"{name} has shape {list(shape)}, the model's is {list(expected[ours])}"
        found.add(ours)
    missing = [k for k in expected if k not in found and not any(k.endswith(o) for o in optional)]
    if missing:
        return f"{len(missing)} tensor(s) missing, e.g. {missing[0]!r}"
    return None


def config_text(config: Mapping[str, Any], keys: Iterable[str]) -> str:
    """``key=value, ...`` of the ``keys`` ``config`` has (the architecture at a glance)."""
    return ", ".join(f"{k}={config[k]}" for k in keys if k in config)


def compare_config(component: str, ours: Mapping[str, Any], theirs: Mapping[str, Any], release: str) -> str:
    """One line: ``component``'s config against the released one (``theirs``, from ``release``):
    matches, or the first four keys that differ."""
    differ = sorted(k for k in theirs if not k.startswith("_") and k in ours and ours[k] != theirs[k])
    if not differ:
        return f"{component} config matches {release}"
    return f"{component} differs from {release} in " + ", ".join(f"{k}={ours[k]!r} (released {theirs[k]!r})" for k in differ[:4])


def component_row(root: Path, name: str, keys: Iterable[str] = (), *, weights: str = "safetensors") -> Row | None:
    """The row of a diffusers / transformers component folder ``root / name`` (None when it is not
    there): its class (from its config), ``keys`` of its config, and its weight files
    (``weights="safetensors"``: the ``*.safetensors`` headers, ``.bin`` files counted only;
    ``"any"``: ``.bin`` files read too, as a torch file)."""
    from newsmotion_engine.render.backends.wan.diffusers_config import read_json

    folder = root / name
    if not folder.is_dir():
        return None
    config_file = next((folder / n for n in ("config.json", "scheduler_config.json", "tokenizer_config.json", "preprocessor_config.json")
                        if (folder / n).is_file()), None)  # fmt: skip
    config = read_json(config_file) if config_file else {}
    cls = config.get("_class_name") or (config.get("architectures") or [None])[0] or config.get("tokenizer_class") \
        or config.get("image_processor_type") or "?"  # fmt: skip
    files = sorted(folder.glob("*.safetensors"))
    bins = sorted(folder.glob("*.bin"))
    if files:
        text = weights_text(files)
    elif bins and weights == "any":
        text = weights_text(bins)
    else:
        text = f"{len(bins)} .bin file(s) (pickle; not inspected)" if bins else ""
    return name, str(cls), config_text(config, keys), text
