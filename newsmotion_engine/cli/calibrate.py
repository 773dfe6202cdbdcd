"""``newsmotion calibrate``: fit acceleration parameters to a model's weights."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Annotated, Optional

import typer
from rich.table import Table

from newsmotion_engine.cli.console import console, parse_options, progress_bar, step_tasks
from newsmotion_engine.storage import Storage


calibrate_app = typer.Typer(help="Fit acceleration parameters to a model's weights.", no_args_is_help=True)


@calibrate_app.command("teacache")
def calibrate_teacache_cmd(
    persona: Annotated[str, typer.Option("--persona", help="Persona id.")],
    loop: Annotated[str, typer.Option("--loop", help="Loop id.")],
    option: Annotated[Optional[list[str]], typer.Option("--option", "-o", help="Backend option KEY=VALUE (e.g. model_path=..., steps=20).")] = None,
    width: Annotated[int, typer.Option(help="Render width (even).")] = 720,
    height: Annotated[int, typer.Option(help="Render height (even).")] = 1280,
    degree: Annotated[int, typer.Option(help="Polynomial degree.")] = 4,
    backend: Annotated[str, typer.Option("--backend", help="wan-animate, or wan-animate-2 (with -o schedule=base).")] = "wan-animate",
    json_path: Annotated[Optional[Path], typer.Option("--json", help="Write the fit here.")] = None,
) -> None:
    """Record a full wan-animate (or wan-animate-2 base-schedule) render, no skipping, and fit TeaCache's rescale polynomial."""
    from newsmotion_engine.render import RenderSpec
    from newsmotion_engine.render.job import check_render_request
    from newsmotion_engine.render.backends.wan_animate.calibrate import calibrate_teacache

    store = Storage.from_env()
    spec = RenderSpec(width=width, height=height)
    options = parse_options(option or [])
    check_render_request(store, persona, loop)
    with progress_bar() as bar:
        task = bar.add_task(f"recording {persona} x {loop}", total=None)
        result = calibrate_teacache(
            store, persona, loop, options, spec, degree=degree, backend_name=backend, on_step=step_tasks(bar),
            progress=lambda d, t: bar.update(task, completed=d, total=t),
        )
    if json_path is not None:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(result, indent=2) + "\n")
        console.print(f"wrote {json_path}")
    console.print(f"{result['pairs']} recorded pairs, relative RMSE of the fit {result['fit_rel_rmse']:.3f}; weights: {result['weights']}")
    console.print("use: -o teacache=0.15 -o 'teacache_coefficients=" + json.dumps([round(c, 6) for c in result["coefficients"]]) + "'")


def _value(text: str) -> Any:
    """A ``--values`` entry: a JSON number or boolean, else the word itself (``fp8-cudnn``)."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def _register_approximation_calibration(name: str, values_help: str, default: str) -> None:
    """``newsmotion calibrate NAME``: the approximation at each of ``--values`` vs the exact run."""

    def command(
        persona: Annotated[str, typer.Option("--persona", help="Persona id.")],
        loop: Annotated[str, typer.Option("--loop", help="Loop id.")],
        values: str = typer.Option(default, "--values", help=values_help),  # closure values: no Annotated here
        option: Annotated[Optional[list[str]], typer.Option("--option", "-o", help="Backend option KEY=VALUE (wan-animate; wan-animate-2 for fit-segments), e.g. model_path=..., steps=4.")] = None,
        width: Annotated[int, typer.Option(help="Render width (even).")] = 720,
        height: Annotated[int, typer.Option(help="Render height (even).")] = 1280,
        json_path: Annotated[Optional[Path], typer.Option("--json", help="Write the comparison here.")] = None,
    ) -> None:
        from newsmotion_engine.render import RenderSpec
        from newsmotion_engine.render.job import check_render_request
        from newsmotion_engine.render.backends.wan_animate.calibrate import calibrate_approximation

        store = Storage.from_env()
        tried = [_value(v.strip()) for v in values.split(",") if v.strip()]
        check_render_request(store, persona, loop)
        with progress_bar() as bar:
            def progress(label: str):
                task = bar.add_task(f"{persona} x {loop}: {label}", total=None)
                return lambda d, t: bar.update(task, completed=d, total=t)

            result = calibrate_approximation(store, persona, loop, parse_options(option or []), RenderSpec(width=width, height=height),
                                             approximation=name, values=tried, on_step=step_tasks(bar), progress=progress)  # fmt: skip
        if json_path is not None:
            json_path.parent.mkdir(parents=True, exist_ok=True)
            json_path.write_text(json.dumps(result, indent=2) + "\n")
            console.print(f"wrote {json_path}")
        pck = lambda run: "-" if run["pose_pck_body"] is None else f"{run['pose_pck_body']:.3f}"  # noqa: E731
        table = Table("setting", "PSNR dB (min)", "SSIM (min)", "pose pck", "speed-up")
        table.add_row("exact (default)", "", "", pck(result["runs"]["exact"]), "1.00x")
        for label, run in result["runs"].items():
            if label != "exact":
                table.add_row(label, f"{run['psnr_db']:.2f} ({run['psnr_db_min']:.2f})", f"{run['ssim']:.4f} ({run['ssim_min']:.4f})",
                              pck(run), f"{run['speedup_vs_exact']:.2f}x")  # fmt: skip
        console.print(table)
        console.print(f"judge by: {result['judge_by']}")
        console.print(f"weights: {result['weights']}")

    command.__doc__ = f"Render exactly and with {name} at each of --values; PSNR / SSIM of every frame vs the exact run."
    calibrate_app.command(name)(command)


_register_approximation_calibration("pyramid", "pyramid_low_steps values to try, comma-separated.", "1,2")
_register_approximation_calibration("sparse-attention", "Attention densities to try, comma-separated.", "0.5,0.3")
_register_approximation_calibration("keyframes", "Keyframe ratios to try, comma-separated.", "2,3")
_register_approximation_calibration("fit-segments", "fit_segments values to try (wan-animate-2).", "true")
_register_approximation_calibration("cudnn-attention", "Attention kernels to try against the default (wan-animate-2).", "fp8-cudnn")
