"""The pose-fidelity table and aggregate of docs/benchmarks.md, printed from the fidelity result record.

    python -m benchmarks.fidelity_markdown benchmarks/results/fidelity.json

Prints Markdown: one row per render (warp on every portrait and loop, then the wan-animate tiny
baseline) and the aggregate paragraph. Nothing here measures: it only formats the committed JSON,
so the document's figures are the record's.
"""

from __future__ import annotations

import sys
from pathlib import Path

from newsmotion_engine.bench.record import read_result

PARTS = ("head", "torso", "arms")


def _f(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _row(render: dict, label: str) -> str:
    fid = render.get("pose_fidelity") or {}
    per = fid.get("per_part") or {}
    parts = " / ".join(_f((per.get(p) or {}).get("pck")) for p in PARTS)
    follow = render.get("pixel_follow") or {}
    fp = follow.get("per_part_pck") or {}
    flow = f"{_f(follow.get('pck_body'))} ({' / '.join(_f(fp.get(p)) for p in PARTS)})" if follow else "-"
    rigid = render.get("rigid_control")
    ceiling = "-" if not rigid else (f"{_f(rigid.get('pck_body'))} / {_f(rigid.get('motion_energy_ratio'))} "
                                     f"({' / '.join(_f((rigid.get('per_part_pck') or {}).get(p)) for p in PARTS)})")  # fmt: skip
    return (f"| {render['portrait']} | {label} | {_f(fid.get('pck_body'))} | {parts} | {_f(fid.get('pck'))} | "
            f"{_f(fid.get('motion_energy_ratio'))} | {_f(fid.get('mean_px'), 1)} | {flow} | {ceiling} |")  # fmt: skip


def markdown(result: dict) -> str:
    warp = result["warp"]
    lines = ["| portrait | loop | pck head+torso+arms | head / torso / arms | pck all parts | motion energy | mean px | pixels follow (flow) "
             "| judge's ceiling: a perfect rigid render, pck / energy (head / torso / arms) |",
             "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    lines += [_row(r, r["loop"]) for r in warp["renders"]]
    tiny = (result.get("wan_animate_tiny") or {}).get("render")
    if tiny:
        lines.append(_row({**tiny, "pixel_follow": None}, f"{tiny['loop']}, **wan-animate tiny** (random weights, {tiny['size']})"))
    agg, by = warp["aggregate"], warp["by_portrait"]
    pck, energy = agg["pck_body"], agg["motion_energy_ratio"]
    n = agg["measured"]
    per = ", ".join(f"{name} {_f(p['pck_body']['mean'])} / {_f(p['motion_energy_ratio']['mean'])}" for name, p in by.items())
    follows = [r["pixel_follow"]["pck_body"] for r in warp["renders"] if r.get("pixel_follow")]
    lines += ["", (f"Aggregate over the {n} warp renders: pck (head, torso, arms) mean {_f(pck['mean'])} (min {_f(pck['min'])}, "
                   f"max {_f(pck['max'])}), {agg['meets_pck']} of {n} reach 0.9; motion energy mean {_f(energy['mean'])} "
                   f"(min {_f(energy['min'])}, max {_f(energy['max'])}), {agg['meets_motion_energy']} of {n} reach 0.8; "
                   f"**{agg['meets_both']} of {n} meet both targets**. Per portrait (pck / motion energy, means): {per}. "
                   f"Pixels follow (flow check) mean {_f(sum(follows) / len(follows)) if follows else '-'}; "
                   f"{sum(f >= 0.9 for f in follows)} of {len(follows)} ≥ 0.9.")]  # fmt: skip
    rigid = agg.get("rigid_control")
    if rigid:
        lines += ["", (f"The judge's ceiling (the rigid control, {rigid['measured']} renders): pck mean {_f(rigid['pck_body_mean'])}, "
                       f"{rigid['meets_pck']} reach 0.9; motion energy mean {_f(rigid['motion_energy_mean'])}, "
                       f"{rigid['meets_motion_energy']} reach 0.8; **{rigid['meets_both']} of {rigid['measured']} would meet both "
                       f"targets** — a render perfect for the loop's rigid motion, read by the same extractor.")]  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m benchmarks.fidelity_markdown FIDELITY_JSON", file=sys.stderr)
        return 2
    try:
        print(markdown(read_result(Path(argv[0])).data))
    except (ValueError, KeyError, TypeError) as exc:  # NotABenchResult is a ValueError
        print(f"error: {argv[0]}: not a fidelity result ({type(exc).__name__}: {exc})", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
