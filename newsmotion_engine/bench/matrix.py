"""The acceleration matrix: every diffusion backend, stock vs ours on the reference design's clip,
read from the committed result records (one row per record: a backend measured on two cards has
two rows), with what is not measured yet said as such and the command that measures it.

Each backend's GPU bench writes its own record (``benchmarks/<bench>.py``; the Wan ones through
``benchmarks/device_gpu.sh``); this module only reads them:

- the Wan records carry the figures in their headline (``stock (s)``, ``ours ... (s)``,
  ``peak, ours (GiB)``, ``peak, stock (GiB)``);
- the model-zoo records (``benchmarks/lab_record.py``'s ``stock_vs_ours``) carry, per clip size,
  ``rows[size][variant]`` (``end_to_end_s``, ``peak_vram_gib``) and ``fastest_{size}``.

``newsmotion bench matrix`` prints the table (``--markdown`` for docs/benchmarks.md), and with
``--run`` runs the benches on a GPU machine first; the scorecard carries one ``matrix`` row per
backend.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any

from newsmotion_engine.bench.record import BenchResult

__all__ = ["ENTRIES", "MatrixEntry", "MatrixRow", "matrix_markdown", "read_matrix"]

GOAL_SPEEDUP = 2.0
H100_GIB = 80.0


@dataclass(frozen=True)
class MatrixEntry:
    """A backend's place in the matrix: its records' name pattern, the clip it renders, and the
    command (from the repository root, on a GPU machine) that writes such a record."""

    backend: str
    record: str  # regular expression on the record's name: the current one per card, {bench}_{card}; an earlier
    # record kept under a descriptive name ({bench}_{what}_{card}) is history, not a row
    clip: str
    command: str


ENTRIES = (
    MatrixEntry("wan-animate", r"^wan_animate_clip_", "120 frames at 720x1280",
                "bash benchmarks/device_gpu.sh clip 14b '{\"parts\": [\"stock\", \"ours\"], \"variants\": [\"keyframes_1to3\"], \"budget_s\": 420}'"),
    MatrixEntry("wan-animate-2", r"^wan_animate_2_clip_h\d", "120 frames at 720x1280",
                "bash benchmarks/device_gpu.sh animate2 14b clip-stock, then clip-ours (one command each)"),
    MatrixEntry("echomimic-v3", r"^echomimic_v3_h\d", "10 s talking clip at 768x768 and 720x1280 (576x1024 framed)",
                "python -m benchmarks.echomimic_v3 --json benchmarks/results/echomimic_v3_<card>.json"),
    MatrixEntry("mimicmotion", r"^mimicmotion_h\d", "120 frames for 720x1280 (576x1024 framed)",
                "python -m benchmarks.mimicmotion --json benchmarks/results/mimicmotion_<card>.json"),
    MatrixEntry("champ", r"^champ_h\d", "120 frames for 720x1280 (512x912 framed)",
                "python -m benchmarks.champ --smpl SMPL_NEUTRAL.pkl (or synthetic) --json benchmarks/results/champ_<card>.json"),
    MatrixEntry("scail-2", r"^scail2_h\d", "120 frames for 720x1280 (704x1280 framed)",
                "python -m benchmarks.scail2 --steps 2 --variants stock, then --variants batch_cfg+fp8+compile+fp8_attention "
                "--warm-up-steps 1 (one command each), then --combine the two records"),
)  # fmt: skip


@dataclass(frozen=True)
class MatrixRow:
    """One backend on one card (``record`` None: not measured yet; ``command`` measures it)."""

    backend: str
    clip: str
    command: str
    record: str | None = None
    device: str | None = None
    stock_s: float | None = None
    ours_s: float | None = None
    ours_variant: str | None = None
    peak_stock_gib: float | None = None
    peak_ours_gib: float | None = None
    steps: int | None = None
    note: str = ""

    @property
    def speedup(self) -> float | None:
        return round(self.stock_s / self.ours_s, 2) if self.stock_s and self.ours_s else None

    @property
    def meets_goal(self) -> bool | None:
        """>= 2x stock and fits one 80 GB H100 (``peak_ours_gib``: the smallest of our variants'
        peaks); None: not both measured."""
        if self.speedup is None or self.peak_ours_gib is None:
            return None
        return self.speedup >= GOAL_SPEEDUP and self.peak_ours_gib <= H100_GIB

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "speedup": self.speedup, "meets_goal": self.meets_goal}


def _from_headline(result: BenchResult) -> dict[str, Any]:
    h = result.headline
    ours = [k for k in h if k.startswith("ours") and k.endswith("(s)")] or [k for k in ("clip (s)",) if k in h]
    # the smallest peak among our variants (e.g. with the K/V offloaded): what has to fit one card
    peaks = [v for k, v in h.items() if k.startswith("peak, ours") or k == "peak (GiB)"]
    return {"stock_s": h.get("stock (s)"), "ours_s": h[ours[0]] if ours else None,
            "ours_variant": ours[0].removesuffix(" (s)") if ours else None,
            "peak_stock_gib": h.get("peak, stock (GiB)"), "peak_ours_gib": min(peaks) if peaks else None,
            "note": "" if "stock (s)" in h else "ours only: stock did not run on this card"}  # fmt: skip


def _from_rows(result: BenchResult) -> list[dict[str, Any]]:
    data, out = result.data, []
    for size, variants in (data.get("rows") or {}).items():
        stock = variants.get("stock") or {}
        best = data.get(f"fastest_{size}")
        ours = variants.get(best) or {} if best else {}
        out.append({"stock_s": stock.get("end_to_end_s"), "ours_s": ours.get("end_to_end_s"), "ours_variant": best,
                    "peak_stock_gib": stock.get("peak_vram_gib"), "peak_ours_gib": ours.get("peak_vram_gib"),
                    "note": f"size {size}"})  # fmt: skip
    return out


def read_matrix(results: list[BenchResult]) -> list[MatrixRow]:
    """Every :data:`ENTRIES` backend's measured rows from ``results`` (a record per name: a later
    one of the same name replaces an earlier one), or one row saying it is not measured."""
    results = list({r.name: r for r in results}.values())
    rows: list[MatrixRow] = []
    for entry in ENTRIES:
        mine = [r for r in results if re.search(entry.record, r.name)]
        if not mine:
            rows.append(MatrixRow(entry.backend, entry.clip, entry.command, note="not measured yet"))
            continue
        for result in sorted(mine, key=lambda r: r.name):
            base = {"backend": entry.backend, "clip": entry.clip, "command": result.command or entry.command,
                    "record": result.name, "device": result.device, "steps": _steps(result.data)}  # fmt: skip
            found = _from_rows(result) if result.data.get("rows") else [_from_headline(result)]
            rows.extend(MatrixRow(**base, **figures) for figures in found)
    return rows


def _steps(data: dict[str, Any]) -> int | None:
    """The denoising steps of both sides: the record's ``steps`` or its ``shape``'s (the zoo
    benches keep the clip's settings there), else the steps of the schedule the wan-animate-2 clip
    records name in ours' options (``steps`` unset: the schedule's own count)."""
    shape = data.get("shape")
    found = data.get("steps") or (shape.get("steps") if isinstance(shape, dict) else None)
    return found or _schedule_steps(data)


def _schedule_steps(data: dict[str, Any]) -> int | None:
    ours = (data.get("clip") or {}).get("ours") or data.get("ours") or {}  # a joined clip record, or a clip-ours run
    options = ours.get("options") or {}
    steps, schedule = options.get("steps"), options.get("schedule")
    if steps not in (None, "None"):  # the bench writes the options as strings
        return int(steps)
    if schedule in (None, "None"):
        return None
    from newsmotion_engine.render.backends.wan_animate_2.config import SCHEDULES

    spec = SCHEDULES.get(schedule)
    return spec.steps if spec else None


def _cell(value: Any) -> str:
    return "—" if value is None else f"{value:g}" if isinstance(value, float) else str(value)


def matrix_markdown(rows: list[MatrixRow]) -> str:
    """The matrix as a markdown table (the docs' and the CLI's)."""
    lines = ["| backend | card | clip | steps | stock (s) | ours (s) | speed-up | peak stock / ours (GiB) | goal | record |",
             "|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in rows:
        goal = {True: "met", False: "not met", None: "—"}[r.meets_goal]
        lines.append(f"| {r.backend} | {r.device or 'not measured'} | {r.clip}{f' ({r.note})' if r.note and r.record else ''} | "
                     f"{_cell(r.steps)} | {_cell(r.stock_s)} | {_cell(r.ours_s)}{f' ({r.ours_variant})' if r.ours_variant else ''} | "
                     f"{_cell(r.speedup)}{'x' if r.speedup else ''} | {_cell(r.peak_stock_gib)} / {_cell(r.peak_ours_gib)} | {goal} | "
                     f"{f'`{r.record}.json`' if r.record else f'run: `{r.command}`'} |")  # fmt: skip
    return "\n".join(lines)
