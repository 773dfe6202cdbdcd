"""``newsmotion bench``: the product's benchmarks (the nightly suites and the GPU forward bench),
each written as a result record. The GPU lab benches run as ``python -m benchmarks.<name>``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer
from rich.table import Table

from newsmotion_engine.cli.console import cell, console
from newsmotion_engine.errors import NewsmotionError

if TYPE_CHECKING:
    from newsmotion_engine.bench.record import BenchResult


bench_app = typer.Typer(help="Benchmarks (results as JSON).", no_args_is_help=True)


def show_record(result: BenchResult, path: Optional[Path]) -> None:
    """Write a product bench's record to ``path`` (when given) and print its headline."""
    from newsmotion_engine.bench import record

    if path is not None:
        record.write_result(path, result)
        console.print(f"wrote {path}")
    table = Table("measure", "value")
    for label, value in result.headline.items():
        table.add_row(label, record.figure_text(value))
    console.print(table)


@bench_app.command("guidance")
def bench_guidance_cmd(
    json_path: Annotated[Optional[Path], typer.Option("--json", help="Write the result JSON here.")] = None,
    loads: Annotated[int, typer.Option(help="Timed loads per measure.")] = 2000,
) -> None:
    """Guidance cache load latency (warm/cold p50/p99) vs re-extraction, and pose drawing speed."""
    from newsmotion_engine.bench.guidance import bench_guidance
    from newsmotion_engine.bench.suites import bench_record

    show_record(bench_record("guidance", bench_guidance(loads=loads, log=lambda m: console.print(f"[dim]{m}[/]"))), json_path)


@bench_app.command("persona")
def bench_persona_cmd(
    json_path: Annotated[Optional[Path], typer.Option("--json", help="Write the result JSON here.")] = None,
) -> None:
    """Persona cache load latency (warm/cold p50/p99) vs the time to build it (sample persona)."""
    from newsmotion_engine.bench.suites import run_suite

    show_record(run_suite("persona", log=lambda m: console.print(f"[dim]{m}[/]")), json_path)


@bench_app.command("warp")
def bench_warp_cmd(
    json_path: Annotated[Optional[Path], typer.Option("--json", help="Write the result JSON here.")] = None,
) -> None:
    """Warp backend end-to-end fps at 720x1280 (render + encode), with ms per stage."""
    from newsmotion_engine.bench.suites import run_suite

    show_record(run_suite("warp", log=lambda m: console.print(f"[dim]{m}[/]")), json_path)


@bench_app.command("matte")
def bench_matte_cmd(
    json_path: Annotated[Optional[Path], typer.Option("--json", help="Write the result JSON here.")] = None,
) -> None:
    """Matte cleanliness on the sample portraits, before and after cleaning: matte outside the
    person region, background fragments, edge halo width."""
    from newsmotion_engine.bench.suites import run_suite

    result = run_suite("matte", json_path, log=lambda m: console.print(f"[dim]{m}[/]")).data
    if json_path is not None:
        console.print(f"wrote {json_path}")
    table = Table("portrait", "framing", "outside before", "outside after", "fragments", "halo px before", "halo px after")
    for name, by_framing in result["portraits"].items():
        for framing, row in by_framing.items():
            if not isinstance(row, dict) or "before" not in row:
                continue
            b, a = row["before"], row["after"]
            table.add_row(name, framing, f"{b['outside_fraction']:.4f}", f"{a['outside_fraction']:.4f}",
                          f"{b['fragments']} -> {a['fragments']}", f"{b['halo_width_px']:.2f}", f"{a['halo_width_px']:.2f}")  # fmt: skip
    console.print(table)


@bench_app.command("fidelity")
def bench_fidelity_cmd(
    json_path: Annotated[Optional[Path], typer.Option("--json", help="Write the result JSON here.")] = None,
    sheets: Annotated[Optional[Path], typer.Option("--sheets", help="Also write a contact sheet PNG per portrait into this folder.")] = None,
    portrait: Annotated[Optional[list[str]], typer.Option("--portrait", help="Sample portrait (repeatable; default all).")] = None,
    loop: Annotated[Optional[list[str]], typer.Option("--loop", help="Canonical loop (repeatable; default all 7).")] = None,
    stride: Annotated[int, typer.Option(help="Compare every N-th frame.")] = 4,
    wan: Annotated[bool, typer.Option("--wan/--no-wan", help="Also the wan-animate tiny baseline render.")] = True,
) -> None:
    """Pose fidelity of every loop on every sample portrait (warp), plus the wan-animate tiny
    baseline; the aggregate against the targets (pck >= 0.9, motion energy >= 0.8)."""
    from newsmotion_engine.bench.fidelity import bench_fidelity
    from newsmotion_engine.bench.suites import private_storage
    from newsmotion_engine.render.fidelity import mediapipe_available

    if not mediapipe_available():
        raise NewsmotionError("bench fidelity needs mediapipe (its holistic extractor re-reads the renders)")
    with private_storage() as store:
        result = bench_fidelity(store, portraits=portrait, loops=loop, stride=stride, wan_tiny=wan, sheets=sheets,
                                log=lambda m: console.print(f"[dim]{m}[/]"))  # fmt: skip
    if json_path is not None:
        from newsmotion_engine.bench.record import write_result as write_record
        from newsmotion_engine.bench.suites import bench_record

        write_record(json_path, bench_record("fidelity", result))
        console.print(f"wrote {json_path}")
    table = Table("portrait", "loop", "backend", "pck body", "pck", "motion energy", "mean px")
    rows = result["warp"]["renders"] + ([result["wan_animate_tiny"]["render"]] if result["wan_animate_tiny"] else [])
    for row in rows:
        pf = row["pose_fidelity"] or {}
        table.add_row(row["portrait"], row["loop"], row["backend"], *(cell(pf.get(k)) for k in ("pck_body", "pck", "motion_energy_ratio", "mean_px")))
    console.print(table)
    agg = result["warp"]["aggregate"]
    console.print(
        f"warp: {agg['meets_both']}/{agg['renders']} renders meet both targets; mean pck_body "
        f"{cell((agg['pck_body'] or {}).get('mean'))}, mean motion energy {cell((agg['motion_energy_ratio'] or {}).get('mean'))}"
    )


@bench_app.command("gpu")
def bench_gpu_cmd(
    preset: Annotated[str, typer.Option(help="Architecture preset: tiny, smoke, 1.3b, 14b (random weights).")] = "14b",
    json_path: Annotated[Optional[Path], typer.Option("--json", help="Write the result JSON here.")] = None,
    width: Annotated[int, typer.Option(help="Frame width.")] = 720,
    height: Annotated[int, typer.Option(help="Frame height.")] = 1280,
    frames: Annotated[int, typer.Option(help="Frames per segment.")] = 77,
    device: Annotated[str, typer.Option(help="auto, cuda or cpu.")] = "auto",
) -> None:
    """wan-animate transformer forward (GPU): stock bf16 vs each acceleration, per-forward ms,
    weights/peak VRAM. The render part (stock pipeline vs ours) is `python -m benchmarks.gpu`."""
    from newsmotion_engine.bench.gpu import bench_gpu_forward, forward_record

    result = bench_gpu_forward(preset=preset, width=width, height=height, frames=frames, device=device, json_path=json_path,
                               log=lambda m: console.print(f"[dim]{m}[/]"))  # fmt: skip
    show_record(forward_record(json_path.stem if json_path else f"gpu_forward_{preset}", result), None)
    if json_path is not None:
        console.print(f"wrote {json_path}")


@bench_app.command("matrix")
def bench_matrix_cmd(
    run: Annotated[Optional[list[str]], typer.Option("--run", help="Run this backend's GPU bench first (repeatable; 'all': every one not measured yet). Needs a CUDA GPU and the repository root.")] = None,
    markdown: Annotated[bool, typer.Option("--markdown", help="Print the table as markdown (docs/benchmarks.md).")] = False,
) -> None:
    """The acceleration matrix: every diffusion backend, stock vs ours on the reference design's
    clip, from the committed result records; what is not measured yet says which command measures it."""
    import shlex
    import subprocess
    import sys

    from newsmotion_engine.bench.matrix import ENTRIES, read_matrix
    from newsmotion_engine.bench.matrix import matrix_markdown as to_markdown
    from newsmotion_engine.bench.scorecard import bench_results, bench_results_dir

    folder = bench_results_dir()
    rows = read_matrix(bench_results([folder]))
    if run:
        import torch

        if not torch.cuda.is_available():
            raise NewsmotionError("bench matrix --run: the benches need a CUDA GPU; this machine has none")
        if not Path("benchmarks").is_dir():
            raise NewsmotionError("bench matrix --run: run it from the repository root (the GPU benches are benchmarks/*.py)")
        measured = {r.backend for r in rows if r.record}
        wanted = [e for e in ENTRIES if e.backend in run or ("all" in run and e.backend not in measured)]
        card = torch.cuda.get_device_name().split()[1].lower() if len(torch.cuda.get_device_name().split()) > 1 else "gpu"
        for entry in wanted:
            if not entry.command.startswith("python -m "):
                console.print(f"{entry.backend}: runs in several device commands; by hand: {entry.command}")
                continue
            argv = [sys.executable, *shlex.split(entry.command.replace("<card>", card))[1:]]
            console.print(f"{entry.backend}: {shlex.join(argv[1:])}")
            if subprocess.run(argv).returncode != 0:
                raise NewsmotionError(f"bench matrix: the {entry.backend} bench failed (its output is above)")
        rows = read_matrix(bench_results([folder]))
    if markdown:
        print(to_markdown(rows))
        return
    table = Table("backend", "card", "stock (s)", "ours (s)", "speed-up", "peak ours (GiB)", "goal", "record / how to measure")
    for r in rows:
        table.add_row(r.backend, r.device or "—", cell(r.stock_s), cell(r.ours_s), cell(r.speedup), cell(r.peak_ours_gib),
                      {True: "met", False: "not met", None: "—"}[r.meets_goal], r.record or r.command)  # fmt: skip
    console.print(table)
