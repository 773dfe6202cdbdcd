"""The ``newsmotion`` command.

Examples::

    newsmotion loops list
    newsmotion guidance build --all
    newsmotion guidance extract my_take.mp4 --loop-id weather_point
    newsmotion caches --json
    newsmotion model check /models/Wan2.2-Animate-14B-Diffusers
    newsmotion bench guidance --json benchmarks/results/guidance.json

Errors the user can fix (bad input, bad cache) print as one ``error:`` line and exit 1.
The CLI is an edge of the program: each command decides the storage root once
(``Storage.from_env()``: ``$NEWSMOTION_STORAGE``, else ``./storage``) and passes it down.
"""

from __future__ import annotations

import json
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import click
import typer
from rich.console import Console, ConsoleDimensions
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from newsmotion_engine.errors import BadInputError, NewsmotionError
from newsmotion_engine.storage import Storage

if TYPE_CHECKING:
    from newsmotion_engine.bench.record import BenchResult

app = typer.Typer(help="newsmotion: gesture-loop presenter clips from an anchor's portrait.", no_args_is_help=True)
loops_app = typer.Typer(help="The motion loop palette.", no_args_is_help=True)
guidance_app = typer.Typer(help="Tier-1 motion guidance caches.", no_args_is_help=True)
bench_app = typer.Typer(help="Benchmarks (results as JSON).", no_args_is_help=True)
app.add_typer(loops_app, name="loops")
app.add_typer(guidance_app, name="guidance")
persona_app = typer.Typer(help="Tier-2 persona appearance caches.", no_args_is_help=True)
calibrate_app = typer.Typer(help="Fit acceleration parameters to a model's weights.", no_args_is_help=True)
app.add_typer(calibrate_app, name="calibrate")
app.add_typer(bench_app, name="bench")
app.add_typer(persona_app, name="persona")
studio_app = typer.Typer(help="The studio: a static offline site to judge renders side by side.", no_args_is_help=True)
app.add_typer(studio_app, name="studio")
model_app = typer.Typer(help="Model checkpoints.", no_args_is_help=True)
app.add_typer(model_app, name="model")

# Output that is not a terminal (a pipe, a file, CI logs) is laid out this wide.
PIPE_WIDTH = 10_000


class PipeConsole(Console):
    """A rich Console that never cuts text short when its output is not a terminal.

    Rich lays tables out for the terminal's width (80 columns when there is none) and ellipsizes
    cells that do not fit: ``newsmotion scorecard | grep`` saw "astron…". Piped output keeps the
    same table (people read logs too; ``--json`` is the machine format) but at a width no table
    reaches, so every cell is complete and no line is wrapped.
    """

    @property
    def size(self) -> ConsoleDimensions:
        size = super().size
        return size if self.is_terminal else ConsoleDimensions(PIPE_WIDTH, size.height)


console = PipeConsole()


def progress_bar() -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=False,
    )


def step_tasks(bar: Progress) -> Callable[[str], Callable[[int, int], None]]:
    """An ``on_step(label)`` for the engine's visible steps: each starts its own progress line."""

    def on_step(label: str) -> Callable[[int, int], None]:
        task = bar.add_task(label, total=None)
        return lambda done, total: bar.update(task, completed=done, total=total)

    return on_step


def selected_ids(
    what: str, given: list[str] | None, use_all: bool, every: Callable[[], list[str]], check: Callable[[str], object]
) -> list[str]:
    """The ids named on the command line, or ``every()`` with ``--all``; each is ``check``-ed
    (unknown or invalid ids fail) before any work starts."""
    if use_all == bool(given):
        raise click.UsageError(f"give {what} ids or --all (not both)")
    ids = every() if use_all else list(given or [])
    for cache_id in ids:
        check(cache_id)
    return ids


def human_bytes(n: int | float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


# ---------------------------------------------------------------- loops
@loops_app.command("list")
def loops_list() -> None:
    """List the canonical loops and custom loops from driving videos."""
    from newsmotion_engine.guidance.cache import driving_loop_ids, find_driving_video
    from newsmotion_engine.guidance.catalogue import canonical_loops, is_canonical

    store = Storage.from_env()
    table = Table("loop", "source", "description")
    for loop_id, spec in canonical_loops().items():
        table.add_row(loop_id, "canonical", spec.description)
    for loop_id in driving_loop_ids(store):
        if not is_canonical(loop_id):
            table.add_row(loop_id, "driving video", str(find_driving_video(store, loop_id)))
    console.print(table)


# ---------------------------------------------------------------- guidance
@guidance_app.command("build")
def guidance_build(
    loops: Annotated[Optional[list[str]], typer.Argument(help="Loop ids (default with --all: every loop).")] = None,
    all_loops: Annotated[bool, typer.Option("--all", help="Build every known loop.")] = False,
    force: Annotated[bool, typer.Option("--force", help="Rebuild even when the cache is current.")] = False,
) -> None:
    """Build (or reuse when current) guidance caches."""
    from newsmotion_engine.guidance.cache import all_loop_ids, check_loop_exists, ensure_guidance

    store = Storage.from_env()
    ids = selected_ids("loop", loops, all_loops, lambda: all_loop_ids(store), lambda i: check_loop_exists(store, i))
    table = Table("loop", "frames", "fps", "source", "action")
    with progress_bar() as bar:
        overall = bar.add_task("guidance caches", total=len(ids))
        for loop_id in ids:
            frames_task = bar.add_task(f"  {loop_id}", total=None)

            def on_progress(done: int, total: int, task=frames_task) -> None:
                bar.update(task, completed=done, total=total)

            cache, rebuilt = ensure_guidance(store, loop_id, force=force, progress=on_progress)
            bar.update(frames_task, completed=cache.frames, total=cache.frames, visible=False)
            bar.advance(overall)
            table.add_row(loop_id, str(cache.frames), str(cache.fps), cache.source_kind, "built" if rebuilt else "current")
    console.print(table)


@guidance_app.command("extract")
def guidance_extract(
    video: Annotated[Path, typer.Argument(help="A driving video of a person performing the gesture.")],
    loop_id: Annotated[str, typer.Option("--loop-id", help="Id of the new loop (a slug).")],
    force: Annotated[bool, typer.Option("--force", help="Replace an existing custom loop of that id.")] = False,
) -> None:
    """Add a custom loop: extract whole-body keypoints from VIDEO, cache them, and keep the video in
    motion/driving/ so the loop is rebuilt if the video changes."""
    from newsmotion_engine import cachedir
    from newsmotion_engine.guidance.cache import VIDEO_SUFFIXES, ensure_guidance, find_driving_video
    from newsmotion_engine.guidance.catalogue import is_canonical
    from newsmotion_engine.ids import validate_id

    store = Storage.from_env()
    validate_id(loop_id, "loop id")
    if is_canonical(loop_id):
        raise NewsmotionError(f"loop id {loop_id!r} is a canonical loop; choose another id")
    if not video.is_file():
        raise BadInputError(video, "driving video not found")
    suffix = video.suffix.lower()
    if suffix not in VIDEO_SUFFIXES:
        raise BadInputError(video, f"unsupported video type {suffix or '(none)'}; use one of {', '.join(VIDEO_SUFFIXES)}")
    existing = find_driving_video(store, loop_id)
    if existing is not None and not force and existing.resolve() != video.resolve():
        raise NewsmotionError(f"loop {loop_id!r} already exists ({existing}); pass --force to replace it")
    with progress_bar() as bar:
        task = bar.add_task(f"extracting {video.name}", total=None)
        cache, _ = ensure_guidance(
            store, loop_id, video=video, force=True, progress=lambda d, t: bar.update(task, completed=d, total=t)
        )
    # Keep the source beside the other driving videos only after extraction succeeded, so a bad
    # video leaves nothing behind; copy-then-rename keeps a watching sensor from seeing half a file.
    target = store.driving_dir / f"{loop_id}{suffix}"
    if existing is not None and existing != target:
        existing.unlink()
    if video.resolve() != target.resolve():
        cachedir.copy_into_place(video, target)
    console.print(f"loop [bold]{loop_id}[/]: {cache.frames} frames at {cache.fps} fps -> {cache.path}")


# ---------------------------------------------------------------- persona
@persona_app.command("add")
def persona_add(
    image: Annotated[Path, typer.Argument(help="Portrait: jpg, png or webp (waist-up, ideally on chroma green).")],
    persona_id: Annotated[str, typer.Option("--id", help="Persona id (a slug).")],
    force: Annotated[bool, typer.Option("--force", help="Rebuild, or replace a persona made from another portrait.")] = False,
    framing: Annotated[Optional[str], typer.Option("--framing", help=FRAMING_HELP)] = None,
) -> None:
    """Normalize a portrait once: framing, matte, face mask, landmarks -> a memory-mappable persona cache."""
    from newsmotion_engine.persona.sources import add_persona

    store = Storage.from_env()
    check_framing(framing)
    with progress_bar() as bar:
        task = bar.add_task(f"persona {persona_id}", total=None)
        cache, rebuilt = add_persona(
            store, image, persona_id, force=force, framing=framing,
            progress=lambda d, t: bar.update(task, completed=d, total=t),
        )
    console.print(
        f"persona [bold]{persona_id}[/]: {'built' if rebuilt else 'current, reused'}; matte {cache.matte_method}; "
        f"visible {', '.join(cache.visible_parts)} -> {cache.path}"
    )
    for note in photo_notes(cache.metadata):
        console.print(f"  {note}")


FRAMING_HELP = (
    "medium (default: head top at 10% of the frame, shoulders centred, down to the photo's cut), "
    "wide (the photo's whole width) or as-is (fit, bottom-centre); default: the persona's current framing"
)


def check_framing(framing: str | None) -> None:
    from newsmotion_engine.persona.image import FRAMINGS

    if framing is not None and framing not in FRAMINGS:
        raise click.BadParameter(f"{framing!r} is not one of {', '.join(FRAMINGS)}", param_hint="--framing")


def photo_notes(metadata: dict[str, Any]) -> list[str]:
    """What a persona build did about its photo, for people: the orientation fix and the points
    outside the photo (stored as not visible). ``[]`` for an upright photo showing every point."""
    from newsmotion_engine.persona.landmarks import describe_turns

    notes = []
    turns = int((metadata.get("source_image") or {}).get("upright_rotation_ccw", 0)) // 90
    if turns:
        notes.append(f"the photo was {describe_turns(turns)}: turned upright")
    if metadata.get("out_of_view"):
        notes.append(f"outside the photo (not visible): {', '.join(metadata['out_of_view'])}")
    framing = metadata.get("framing") or {}
    if framing.get("limited_by") == "upscale":
        notes.append(
            f"framing {framing.get('mode')}: the photo is too small to put the head at the headroom line "
            f"without enlarging it past the limit; head top at {framing.get('headroom', 0):.0%} of the frame"
        )
    return notes


@persona_app.command("build")
def persona_build(
    personas: Annotated[Optional[list[str]], typer.Argument(help="Persona ids (default with --all: every kept portrait).")] = None,
    all_personas: Annotated[bool, typer.Option("--all", help="Build every persona with a kept source portrait.")] = False,
    force: Annotated[bool, typer.Option("--force", help="Rebuild even when the cache is current.")] = False,
    framing: Annotated[Optional[str], typer.Option("--framing", help=FRAMING_HELP)] = None,
) -> None:
    """Build (or reuse when current) persona caches from their kept portraits in personas/sources/."""
    from newsmotion_engine.persona.build import ensure_persona
    from newsmotion_engine.persona.cache import persona_source_image
    from newsmotion_engine.persona.sources import source_persona_ids

    store = Storage.from_env()
    check_framing(framing)
    ids = selected_ids(
        "persona", personas, all_personas, lambda: source_persona_ids(store), lambda i: persona_source_image(store, i)
    )
    table = Table("persona", "matte", "visible parts", "photo", "action")
    with progress_bar() as bar:
        for persona_id in ids:
            task = bar.add_task(f"persona {persona_id}", total=None)
            cache, built = ensure_persona(
                store, persona_id, force=force, framing=framing,
                progress=lambda d, t, task=task: bar.update(task, completed=d, total=t),
            )
            bar.update(task, visible=False)
            table.add_row(
                persona_id,
                cache.matte_method,
                ", ".join(cache.visible_parts),
                "; ".join(photo_notes(cache.metadata)) or "-",
                "built" if built else "current",
            )
    console.print(table)


@persona_app.command("list")
def persona_list() -> None:
    """List persona caches with their matte method, visible parts and status."""
    from newsmotion_engine.persona.cache import list_persona_ids, persona_status

    store = Storage.from_env()
    table = Table("persona", "matte", "visible parts", "created", "status")
    for persona_id in list_persona_ids(store):
        status, cache, detail = persona_status(store, persona_id)
        table.add_row(
            persona_id,
            cache.matte_method if cache else "-",
            ", ".join(cache.visible_parts) if cache else "-",
            cache.metadata.get("created_at", "-") if cache else "-",
            status + (f" ({detail})" if detail else ""),
        )
    console.print(table)


@persona_app.command("show")
def persona_show(
    persona_id: Annotated[str, typer.Argument(help="Persona id.")],
    out: Annotated[Optional[Path], typer.Option("--out", help="Preview PNG path (default storage/personas/previews/ID.png).")] = None,
) -> None:
    """Write a preview PNG (portrait, matte, face mask, landmarks) and print the persona's facts."""
    from newsmotion_engine.persona.cache import load_persona
    from newsmotion_engine.persona.landmarks import describe_turns
    from newsmotion_engine.persona.preview import write_preview

    store = Storage.from_env()
    cache = load_persona(store, persona_id)
    out = out or store.persona_previews / f"{persona_id}.png"
    write_preview(cache, out)
    meta = cache.metadata
    table = Table("field", "value")
    table.add_row("matte", cache.matte_method)
    table.add_row("visible parts", ", ".join(cache.visible_parts))
    table.add_row("coverage", ", ".join(f"{k} {v:.1%}" for k, v in meta.get("coverage", {}).items()))
    table.add_row("source size", str(meta.get("source_size")))
    framing = meta.get("framing") or {}
    table.add_row("framing", f"{framing.get('mode', '-')} (scale {framing.get('scale', '-')}, head top at "
                  f"{framing.get('headroom') if framing.get('headroom') is not None else '-'} of the height"
                  + (", limited by the upscale limit" if framing.get("limited_by") else "") + ")")
    table.add_row("orientation", describe_turns(int((meta.get("source_image") or {}).get("upright_rotation_ccw", 0)) // 90))
    table.add_row("outside the photo", ", ".join(meta.get("out_of_view") or []) or "-")
    table.add_row("created", str(meta.get("created_at")))
    console.print(table)
    console.print(f"preview -> {out}")


# ---------------------------------------------------------------- caches
def cache_rows(store: Storage) -> list[dict[str, Any]]:
    """One row per cache (guidance, then persona): id, kind, frames, bytes, created, status."""
    from newsmotion_engine import cachedir
    from newsmotion_engine.guidance.cache import all_loop_ids, guidance_status
    from newsmotion_engine.ids import SLUG_RE
    from newsmotion_engine.persona.cache import list_persona_ids, persona_status

    def row(cache_id: str, kind: str, path: Path, status: str, cache: Any, detail: str) -> dict[str, Any]:
        return {
            "id": cache_id,
            "kind": kind,
            "frames": getattr(cache, "frames", None),
            "bytes": cachedir.cache_bytes(path) if path.is_dir() else 0,
            "created": cache.metadata.get("created_at") if cache else None,
            "status": status,
            "detail": detail,
        }

    root = store.guidance_root
    on_disk = {p.name for p in root.iterdir() if p.is_dir() and SLUG_RE.match(p.name)} if root.is_dir() else set()
    rows = [
        row(loop_id, "guidance", store.guidance_dir(loop_id), *guidance_status(store, loop_id))
        for loop_id in sorted(set(all_loop_ids(store)) | on_disk)
    ]
    rows += [
        row(persona_id, "persona", store.persona_dir(persona_id), *persona_status(store, persona_id))
        for persona_id in list_persona_ids(store)
    ]
    return rows


def print_cache_table(rows: list[dict[str, Any]]) -> None:
    table = Table("id", "kind", "frames", "bytes", "created", "status")
    colour = {"valid": "green", "stale": "yellow", "missing": "dim", "corrupt": "red", "invalid": "red"}
    for row in rows:
        status = f"[{colour.get(row['status'], 'white')}]{row['status']}[/]"
        if row["detail"]:
            status += f" ({row['detail']})"
        table.add_row(
            row["id"], row["kind"], str(row["frames"] or "-"), human_bytes(row["bytes"]), row["created"] or "-", status
        )
    console.print(table)


@app.command("caches")
def caches(as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False) -> None:
    """What is cached: id, kind, frames, bytes, created, valid/stale/missing/corrupt."""
    rows = cache_rows(Storage.from_env())
    if as_json:
        sys.stdout.write(json.dumps(rows, indent=2) + "\n")
    else:
        print_cache_table(rows)


# ---------------------------------------------------------------- bench
def write_result(result: dict[str, Any], path: Optional[Path]) -> None:
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(json.dumps(result, indent=2) + "\n")
        tmp.replace(path)
        console.print(f"wrote {path}")
    table = Table("measure", "value")
    for key, value in result.items():
        if isinstance(value, (int, float, str)):
            table.add_row(key, f"{value:.4g}" if isinstance(value, float) else str(value))
    console.print(table)


def show_record(result: BenchResult, path: Optional[Path]) -> None:
    """Write a product bench's record to ``path`` (when given) and print its headline."""
    from newsmotion_engine.bench import record

    if path is not None:
        record.write_result(path, result)
        console.print(f"wrote {path}")
    table = Table("measure", "value")
    for label, value in result.headline.items():
        table.add_row(label, f"{value:.4g}" if isinstance(value, float) else str(value))
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


def cell(value: Any) -> str:
    from newsmotion_engine.render.telemetry import cell_text

    return cell_text(value)


@bench_app.command("gpu")
def bench_gpu_cmd(
    preset: Annotated[str, typer.Option(help="Architecture preset: tiny, smoke, 1.3b, 14b (random weights).")] = "14b",
    part: Annotated[str, typer.Option(help="forward (transformer variants), render (one segment end to end) or all.")] = "forward",
    json_path: Annotated[Optional[Path], typer.Option("--json", help="Write the result JSON here.")] = None,
    width: Annotated[int, typer.Option(help="Frame width.")] = 720,
    height: Annotated[int, typer.Option(help="Frame height.")] = 1280,
    frames: Annotated[int, typer.Option(help="Frames per segment.")] = 77,
    steps: Annotated[int, typer.Option(help="Denoising steps for the render part.")] = 4,
    device: Annotated[str, typer.Option(help="auto, cuda or cpu.")] = "auto",
) -> None:
    """wan-animate vs stock diffusers: per-forward ms, weights/peak VRAM, end-to-end segment time (GPU)."""
    from newsmotion_engine.bench.gpu import bench_gpu

    result = bench_gpu(
        preset=preset, part=part, width=width, height=height, frames=frames, steps=steps, device=device,
        json_path=json_path, log=lambda m: console.print(f"[dim]{m}[/]"),
    )
    write_result(result, None)


@bench_app.command("sparse")
def bench_sparse_cmd(
    preset: Annotated[str, typer.Option(help="Architecture preset for the forward rows: tiny, smoke, 14b.")] = "14b",
    json_path: Annotated[Optional[Path], typer.Option("--json", help="Write the result JSON here.")] = None,
    forward: Annotated[bool, typer.Option(help="Also time the transformer forward with sparse attention.")] = True,
) -> None:
    """EXPERIMENTAL block-sparse attention (GPU): kernel ms per density vs dense, 14B forward speed-up."""
    from newsmotion_engine.bench.sparse import bench_sparse

    result = bench_sparse(preset, json_path=json_path, forward=forward, log=lambda m: console.print(f"[dim]{m}[/]"))
    write_result(result, None)


@bench_app.command("clip")
def bench_clip_cmd(
    preset: Annotated[str, typer.Option(help="Architecture preset: tiny, smoke, 14b.")] = "14b",
    parts: Annotated[str, typer.Option(help="Comma-separated: vae, stock, ours, queue.")] = "vae,stock,ours",
    variants: Annotated[Optional[str], typer.Option(help="Comma-separated clip variants (default all).")] = None,
    batch: Annotated[int, typer.Option(help="Clips in the queue part's batch.")] = 4,
    budget_s: Annotated[Optional[float], typer.Option("--budget-s", help="Skip measurements that would start after this many seconds.")] = None,
    json_path: Annotated[Optional[Path], typer.Option("--json", help="Write the result JSON here.")] = None,
) -> None:
    """A whole 120-frame 720x1280 clip (GPU): stock WanAnimatePipeline vs ours (sparse keyframes + infill,
    the 3-stage queue; experimental approximations labelled), VAE decode settings, serial vs pipelined batch."""
    from newsmotion_engine.bench.clip import bench_clip

    result = bench_clip(preset, parts=parts.split(","), variants=variants.split(",") if variants else None, batch=batch,
                        budget_s=budget_s, json_path=json_path, log=lambda m: console.print(f"[dim]{m}[/]"))  # fmt: skip
    write_result(result, None)


@bench_app.command("animate2")
def bench_animate2_cmd(
    preset: Annotated[str, typer.Option(help="Architecture preset: tiny (CPU dry run), 1.3b, 14b.")] = "14b",
    part: Annotated[str, typer.Option(help="forward, attention, clip, clip-ours, clip-stock, multistream or all.")] = "forward",
    budget_s: Annotated[float, typer.Option(help="Work that would start later than this is skipped (recorded).")] = 540.0,
    fit_segments: Annotated[bool, typer.Option(help="Ours: the shortest 4k+1 segments that cover the clip.")] = False,
    kv_offload: Annotated[bool, typer.Option(help="Ours: the K/V LRU in pinned host memory.")] = False,
    cold_loop: Annotated[bool, typer.Option(help="clip-ours: also time the clip with the K/V LRU emptied.")] = True,
    profile: Annotated[bool, typer.Option(help="clip-ours: profile one cached forward after the clip (GPU).")] = False,
    json_path: Annotated[Optional[Path], typer.Option("--json", help="Write the result JSON here.")] = None,
) -> None:
    """wan-animate-2 vs diffusers' stock modular pipelines (GPU; random weights): per-forward ms,
    extract pass vs cache hit, K/V bytes, the cached pass's attention alone, a 120-frame clip end
    to end, multi-stream A/B."""
    from newsmotion_engine.bench.animate2 import PARTS, bench_animate2

    if part not in PARTS or part in ("ms-worker",):
        raise NewsmotionError(f"bench animate2 --part {part!r}: use forward, attention, clip, clip-ours, clip-stock, multistream or all")
    result = bench_animate2(preset, part=part, budget_s=budget_s, fit_segments=fit_segments, kv_offload=kv_offload,
                            cold_loop=cold_loop, profile=profile, json_path=json_path, log=lambda m: console.print(f"[dim]{m}[/]"))  # fmt: skip
    write_result(result, None)


@bench_app.command("kernel-sass")
def bench_kernel_sass_cmd(
    json_path: Annotated[Optional[Path], typer.Option("--json", help="Write the result JSON here.")] = None,
) -> None:
    """The FP8 attention kernel compiled for Hopper (sm_90) on this machine: registers, spills,
    tensor-core ops and main-loop instructions per score, per variant and autotune config."""
    try:
        import triton  # noqa: F401
    except ImportError as exc:
        raise NewsmotionError("bench kernel-sass needs triton (it ships the sm_90 compiler and cuobjdump)") from exc
    from newsmotion_engine.bench.kernel_sass import kernel_report

    result = kernel_report()
    if json_path is not None:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(result, indent=2) + "\n")
        console.print(f"wrote {json_path}")
    table = Table("kernel", "registers", "stack B", "shared KiB", "tensor-core ops", "loop instr / score")
    for key, row in result["kernels"].items():
        table.add_row(key, str(row["registers"]), str(row["stack_bytes"]), f"{row['shared_bytes'] / 1024:.0f}",
                      " ".join(row["tensor_core_ops"]), str(row["instructions_per_score"]))  # fmt: skip
    console.print(table)


# ---------------------------------------------------------------- render + scorecard
@app.command("render")
def render_cmd(
    persona: Annotated[str, typer.Option("--persona", help="Persona id.")],
    loop: Annotated[str, typer.Option("--loop", help="Loop id.")],
    backend: Annotated[str, typer.Option("--backend", help="Render backend (see `newsmotion backends`).")] = "warp",
    out: Annotated[Optional[Path], typer.Option("--out", help="Output .mp4 (default storage/motion/renders/P/L/BACKEND.mp4).")] = None,
    width: Annotated[int, typer.Option(help="Output width (even).")] = 720,
    height: Annotated[int, typer.Option(help="Output height (even).")] = 1280,
    fps: Annotated[int, typer.Option(help="Output frame rate.")] = 30,
    background: Annotated[str, typer.Option(help="Background colour #RRGGBB (default chroma green).")] = "#00B140",
    keyframes: Annotated[int, typer.Option(help="Generate every N-th frame and infill the rest by optical flow (1 = every frame).")] = 1,
    option: Annotated[Optional[list[str]], typer.Option("--option", "-o", help="Backend option KEY=VALUE (JSON value), repeatable.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Render even when the clip is current (same inputs).")] = False,
    fidelity: Annotated[bool, typer.Option("--fidelity/--no-fidelity", help="Measure pose fidelity on the clip (needs mediapipe).")] = True,
    fidelity_stride: Annotated[int, typer.Option(help="Pose fidelity: compare every N-th frame.")] = 4,
) -> None:
    """Render one loop performed by one persona to an mp4 (+ telemetry JSON beside it).

    Caches that are missing or stale are built first, each as a visible step, through the same
    functions the Dagster cache assets call; a clip whose inputs did not change is not rendered again.
    """
    from newsmotion_engine.render import RenderSpec, get_backend
    from newsmotion_engine.render.fidelity import FidelityConfig
    from newsmotion_engine.render.job import check_render_request, ensure_render_inputs, render_persona_loop

    store = Storage.from_env()
    spec = RenderSpec(width=width, height=height, fps=fps, background=background, keyframes=keyframes)
    try:
        fidelity_config = FidelityConfig(enabled=fidelity, stride=fidelity_stride)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--fidelity-stride") from None
    if out is not None and out.suffix.lower() != ".mp4":
        raise BadInputError(out, "output must be an .mp4 file")
    engine = get_backend(backend, **parse_options(option or []))
    check_render_request(store, persona, loop, out)
    engine.load()
    try:
        with progress_bar() as bar:
            inputs = ensure_render_inputs(store, persona, loop, engine, spec, on_step=step_tasks(bar))
            task = bar.add_task(f"{persona} x {loop} ({backend})", total=None)
            tele = render_persona_loop(
                store, persona, loop, engine, spec, inputs=inputs, out_path=out, force=force,
                progress=lambda d, t: bar.update(task, completed=d, total=t), fidelity=fidelity_config,
            )
            if tele.outcome == "skipped":
                bar.update(task, visible=False)
    finally:
        engine.close()
    if tele.outcome == "skipped":
        console.print(f"{tele.output}: current (same inputs as the render of {tele.created_at}), not rendered again; --force renders it anyway")
        return
    console.print(
        f"{tele.output}: {tele.frames} frames {tele.width}x{tele.height} @ {tele.fps} fps, "
        f"{tele.fps_achieved:.1f} fps achieved, encoder {tele.encoder}"
        + (f", weights: {tele.weights}" if tele.weights else "")
    )
    pf = tele.pose_fidelity
    if pf is not None:
        console.print(
            f"pose fidelity: pck {cell(pf.pck_body)} (head, torso, arms; all parts {cell(pf.pck)}), motion energy "
            f"{cell(pf.motion_energy_ratio)}, mean error {cell(pf.mean_px)} px over {pf.frames_compared} frames"
            + ("" if pf.meets_targets else f" (targets: pck >= {pf.targets['pck_body']}, motion energy >= {pf.targets['motion_energy_ratio']})")
        )
    else:
        console.print(f"pose fidelity: not measured ({tele.pose_fidelity_reason})")


def parse_options(pairs: list[str]) -> dict[str, Any]:
    """``["threads=2", "preset=\"tiny\""]`` -> ``{"threads": 2, "preset": "tiny"}`` (a value that is not
    JSON is taken as a string)."""
    options: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise click.UsageError(f"--option expects KEY=VALUE, got {pair!r}")
        try:
            options[key] = json.loads(value)
        except ValueError:
            options[key] = value
    return options


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
    from newsmotion_engine.render.wan_animate.calibrate import calibrate_teacache

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
        from newsmotion_engine.render.wan_animate.calibrate import calibrate_approximation

        store = Storage.from_env()
        try:
            tried = [json.loads(v) for v in values.split(",") if v.strip()]
        except ValueError:
            raise click.UsageError(f"--values expects comma-separated numbers, got {values!r}") from None
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


@app.command("backends")
def backends_cmd() -> None:
    """List the registered render backends."""
    from newsmotion_engine.render import available_backends

    for name in available_backends():
        console.print(name)


@model_app.command("check")
def model_check_cmd(folder: Annotated[Path, typer.Argument(help="A diffusers-format checkpoint folder.")]) -> None:
    """Whether FOLDER is a usable checkpoint, for which backend: classes, configs, weights (headers only), defaults."""
    from newsmotion_engine.render.model_check import check_model

    found = check_model(folder)  # an unusable folder: one error line, exit 1
    table = Table("component", "class", "config", "weights (safetensors headers)", title=f"{folder}: {found.backend} ({found.pipeline})")
    for row in found.rows:
        table.add_row(*row)
    table.add_row("release", "", found.release, "")
    for key, value in found.defaults.items():
        table.add_row("default" if key != "warning" else "[yellow]warning[/]", key, str(value), "")
    console.print(table)


@app.command("scorecard")
def scorecard_cmd(
    json_path: Annotated[Optional[Path], typer.Option("--json", help="Also write the scorecard records here.")] = None,
) -> None:
    """Every render's telemetry plus benchmark results; exported to storage/motion/scorecards/{date}.json/.csv."""
    from newsmotion_engine.bench.scorecard import build_scorecard, export_scorecard
    from newsmotion_engine.render.telemetry import RenderTelemetry, cell_text

    store = Storage.from_env()
    frame = build_scorecard(store, on_skip=lambda message: console.print(f"[yellow]warning:[/] {message}"))
    exported = export_scorecard(store, frame)
    if json_path is not None:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(frame.to_json(orient="records", indent=2))
    renders = frame[frame["kind"] == "render"]
    columns = RenderTelemetry.SUMMARY
    table = Table(*(c.replace("_", " ") for c in columns))
    for row in renders.to_dict("records"):
        table.add_row(*(cell_text(row.get(c)) for c in columns))
    console.print(table)
    console.print(f"{len(renders)} renders, {len(frame) - len(renders)} benchmark rows -> {exported[0]}, {exported[1]}")


# ---------------------------------------------------------------- studio
@studio_app.command("build")
def studio_build_cmd(
    pose: Annotated[bool, typer.Option("--pose/--no-pose", help="Measure per-frame pose error on A/B pages (mediapipe on every frame; the slow part).")] = True,
) -> None:
    """Build the studio under storage/motion/studio/: index, a page per render, A/B pages, scorecard charts."""
    from newsmotion_engine.studio.site import build_studio

    store = Storage.from_env()
    report = build_studio(store, pose=pose, log=lambda message: console.print(f"  {message}"))
    for problem in report.problems:
        console.print(f"[yellow]warning:[/] {problem}")
    console.print(
        f"{report.renders} renders, {report.comparisons} A/B comparisons ({report.reused_comparisons} reused) -> {report.index}"
    )
    console.print("open it with `newsmotion studio serve` (or the file itself in a browser)")


@studio_app.command("serve")
def studio_serve_cmd(
    port: Annotated[int, typer.Option("--port", help="TCP port on 127.0.0.1.")] = 8765,
) -> None:
    """Serve the built studio on http://127.0.0.1:PORT/ until interrupted."""
    from newsmotion_engine.studio.server import serve_studio, studio_app as make_app

    store = Storage.from_env()
    make_app(store.studio_dir)  # fails with what to run when there is no site yet
    console.print(f"studio: http://127.0.0.1:{port}/  (Ctrl-C stops)")
    serve_studio(store.studio_dir, port=port)


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the app, turning user-fixable errors into one line and exit status 1."""
    try:
        app(args=argv, standalone_mode=False, prog_name="newsmotion")
    except NewsmotionError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(1)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        print("aborted", file=sys.stderr)
        sys.exit(130)
    sys.exit(0)


if __name__ == "__main__":
    main()
