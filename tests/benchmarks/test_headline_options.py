"""Each zoo backend's page tells a user the ``-o`` options that render as its headline's "ours":
those options must build the techniques of the variant the committed record names fastest, so the
page, the record and the bench cannot drift apart. Only the techniques and the settings a user
chooses are compared (the bench keeps each model's original weights to restore them between
variants, a user's render does not)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

pytest.importorskip("diffusers")

ROOT = Path(__file__).parents[2]

# backend page, bench module, committed record, the record's size key, the options class
CASES = [
    ("mimicmotion", "mimicmotion", "mimicmotion_h100", "720x1280",
     "newsmotion_engine.render.backends.mimicmotion.config:MimicMotionOptions", {}),
    ("champ", "champ", "champ_h100", "720x1280", "newsmotion_engine.render.backends.champ.config:ChampOptions",
     {"smpl_model": "synthetic"}),
    ("echomimic-v3", "echomimic_v3", "echomimic_v3_h100", "768x768",
     "newsmotion_engine.render.backends.echomimic_v3.config:EchoMimicV3Options", {}),
    ("scail-2", "scail2", "scail2_h100", "720x1280", "newsmotion_engine.render.backends.scail_2.config:Scail2Options", {}),
]  # fmt: skip


def _page_options(page: str) -> dict[str, object]:
    text = (ROOT / "docs" / "backends" / f"{page}.md").read_text()
    (found,) = re.findall(r"To render\s+as\s+(?:the\s+headline's\s+|that\s+)ours:\s*`([^`]*)`", text, flags=re.S)
    pairs = re.findall(r"-o\s+(\S+?)=(\S+)", found)
    assert pairs, found
    return {k: json.loads(v) if v in ("true", "false") else v for k, v in pairs}


def _bench_variant(module: str, name: str) -> dict[str, object]:
    import importlib

    bench = importlib.import_module(f"benchmarks.{module}")
    if hasattr(bench, "_variant_options"):
        return bench._variant_options(name)
    table = bench._variants(True)[name]
    return table[0] if isinstance(table, tuple) else table


def _techniques(accelerations) -> dict[str, tuple]:
    """Technique -> the settings a user picks (``keep_original`` is the bench's bookkeeping)."""
    out = {}
    for config in accelerations:
        fields = {k: v for k, v in vars(config).items() if k != "keep_original"}
        out[type(config).__name__] = tuple(sorted(fields.items()))
    return out


@pytest.mark.parametrize("page, module, record, size, options_class, extra", CASES, ids=[c[0] for c in CASES])
def test_the_pages_headline_options_build_the_records_fastest_variant(page, module, record, size, options_class, extra):
    import importlib

    data = json.loads((ROOT / "benchmarks" / "results" / f"{record}.json").read_text())["data"]
    variant = _bench_variant(module, data[f"fastest_{size}"])
    mod, cls = options_class.split(":")
    options = getattr(importlib.import_module(mod), cls).from_mapping({**extra, **_page_options(page)})
    assert _techniques(options.accelerations) == _techniques(variant.get("accelerations", ()))
    for key, value in variant.items():
        if key != "accelerations":
            assert getattr(options, key) == value, key
