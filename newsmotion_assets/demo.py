"""``make demo``: the whole pipeline through Dagster, in process, on the embedded CPU default.

Materializes, with the same asset definitions the UI shows: every loop's guidance cache, the
sample persona (scikit-image's public-domain astronaut), every render persona x loop with the
``warp`` backend, then the scorecard; prints the scorecard and where the mp4s are. Runs are
recorded in ``$DAGSTER_HOME`` (the Makefile points it at ``storage/dagster_home``), so
``make dev`` shows them afterwards as current and requests nothing on its first ticks (the sensors
and automation see the demo's materializations; a test checks it). The demo is an edge of the program: it decides the storage root
once (``$NEWSMOTION_STORAGE``, else ``./storage``) and hands it to every asset as the ``storage``
resource.
"""

import json
import os
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import dagster as dg
from rich.console import Console
from rich.markup import escape
from rich.table import Table

# We knowingly use beta/preview Dagster features (partitioned checks, single-run backfills,
# multi-to-single partition mappings); the demo output is for newsroom users, not for that.
warnings.filterwarnings("ignore", category=dg.BetaWarning)
warnings.filterwarnings("ignore", category=dg.PreviewWarning)

from newsmotion_assets.assets.backend import backend_guidance_cache, backend_persona_cache
from newsmotion_assets.assets.guidance import guidance_cache
from newsmotion_assets.assets.persona import persona_cache
from newsmotion_assets.assets.render import render
from newsmotion_assets.assets.reports import scorecard
from newsmotion_assets.checks import guidance_cache_valid, persona_cache_valid
from newsmotion_assets.partitions import loop_partitions, persona_partitions
from newsmotion_assets.resources import RendererResource, StorageResource, release_warm_backends
from newsmotion_engine.bench.suites import sample_portrait
from newsmotion_engine.cli import PipeConsole
from newsmotion_engine.errors import NewsmotionError
from newsmotion_engine.guidance.cache import all_loop_ids
from newsmotion_engine.persona.sources import install_source
from newsmotion_engine.render.telemetry import RenderTelemetry, cell_text
from newsmotion_engine.storage import Storage
from newsmotion_engine.sweep import sweep_stale_temp

SAMPLE_PERSONA = "astronaut"
# The demo prints its own progress lines; Dagster's per-event debug log would drown them (the
# full event log is in the instance: `make dev` shows it).
QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}
# At least 150 columns on a terminal; complete lines when piped (`make demo | tee demo.log`).
console = PipeConsole(width=max(Console().width, 150))


def _instance() -> dg.DagsterInstance:
    if os.environ.get("DAGSTER_HOME"):
        Path(os.environ["DAGSTER_HOME"]).mkdir(parents=True, exist_ok=True)
        return dg.DagsterInstance.get()
    return dg.DagsterInstance.ephemeral()


def _materialize(runs, key, instance, resources=None, label=""):
    """Partition ``key`` of each list of assets in ``runs``, one run per list, in order; one
    progress line for them all. A base cache and its backend cache take two runs: their backfill
    policies differ (one partition per run vs a whole backfill in one run), and one run of both
    would make Dagster warn that it falls back to one partition per run."""
    t0 = time.perf_counter()
    for assets in runs:
        result = dg.materialize(
            assets, partition_key=key, instance=instance, resources=resources, run_config=QUIET, raise_on_error=False
        )
        if not result.success:
            failures = result.get_step_failure_events()
            detail = failures[0].event_specific_data.error.to_string().strip().splitlines()[-1] if failures else "failed"
            raise NewsmotionError(f"{label or key}: {detail}")
        checks = result.get_asset_check_evaluations()
        failed = [c.check_name for c in checks if not c.passed]
        if failed:
            raise NewsmotionError(f"{label or key}: asset check(s) failed: {', '.join(failed)}")
    console.print(f"  [green]ok[/] {escape(label or str(key))} ({time.perf_counter() - t0:.1f} s)")
    return result


def run_demo(instance: dg.DagsterInstance | None = None, renderer: RendererResource | None = None) -> None:
    """The demo into ``instance`` (default: ``$DAGSTER_HOME``'s, the one ``make dev`` opens), with
    ``renderer`` (default: warp at 720x1280, kept warm; tests pass a smaller size)."""
    started = time.perf_counter()
    instance = instance or _instance()
    store = Storage.from_env()
    on_store = {"storage": StorageResource(root=str(store.root))}
    loops = all_loop_ids(store)
    console.print(f"[bold]newsmotion demo[/] — storage {store.root}")
    swept = sweep_stale_temp(store.root)
    for entry in swept.removed:
        console.print(f"  removed stale temporary {entry.kind} {escape(str(entry.path))} ({entry.why})")

    # The backend is loaded once and kept warm for every run below (backend caches and renders).
    resources = {"renderer": renderer or RendererResource(keep_warm=True), **on_store}
    console.print("[bold]1/4 guidance caches[/] (Tier 1, per loop, with the backend's loop-side cache)")
    instance.add_dynamic_partitions(loop_partitions.name, loops)
    for loop_id in loops:
        _materialize(
            [[guidance_cache, guidance_cache_valid], [backend_guidance_cache]], loop_id, instance, resources,
            label=f"guidance_cache[{loop_id}]",
        )

    console.print("[bold]2/4 persona cache[/] (Tier 2, the sample anchor, with the backend's persona-side cache)")
    sample = sample_portrait(store.persona_samples)
    install_source(store, sample, SAMPLE_PERSONA)
    instance.add_dynamic_partitions(persona_partitions.name, [SAMPLE_PERSONA])
    _materialize(
        [[persona_cache, persona_cache_valid], [backend_persona_cache]], SAMPLE_PERSONA, instance, resources,
        label=f"persona_cache[{SAMPLE_PERSONA}]",
    )

    launcher = resources["renderer"].active_launcher  # $NEWSMOTION_LAUNCHER, else in-process
    where = "backend loaded once" if launcher == "in-process" else f"launcher {launcher}: one engine process per render run"
    console.print(f"[bold]3/4 renders[/] (warp backend, 720x1280 @ 30 fps; {where}; unchanged clips skipped)")
    for loop_id in loops:
        key = dg.MultiPartitionKey({"persona": SAMPLE_PERSONA, "loop": loop_id})
        result = _materialize([[render]], key, instance, resources, label=f"render[{SAMPLE_PERSONA} x {loop_id}]")
        (mat,) = result.asset_materializations_for_node("render")
        if mat.metadata["skipped"].value:
            console.print("     current (same inputs as the clip on disk): not rendered again")
    release_warm_backends()

    console.print("[bold]4/4 scorecard[/]")
    result = dg.materialize([scorecard], instance=instance, resources=on_store, run_config=QUIET, raise_on_error=True)
    (mat,) = result.asset_materializations_for_node("scorecard")
    _print_scorecard(store)
    console.print(f"scorecard files: {mat.metadata['json'].value}, {mat.metadata['csv'].value}")
    console.print(f"mp4s: {store.renders_root / SAMPLE_PERSONA}/<loop>/warp.mp4")
    console.print(f"[bold]demo wall time: {time.perf_counter() - started:.1f} s[/]")


def _print_scorecard(store: Storage) -> None:
    from newsmotion_engine.bench.scorecard import build_scorecard

    frame = build_scorecard(store, on_skip=lambda message: console.print(f"[yellow]warning:[/] {escape(message)}"))
    renders = frame[frame["kind"] == "render"]
    columns = RenderTelemetry.SUMMARY
    table = Table(*(c.replace("_", " ") for c in columns))
    for row in renders.to_dict("records"):
        table.add_row(*(escape(cell_text(row.get(c))) for c in columns))
    console.print(table)
    bench = frame[frame["kind"] == "bench"]
    if not bench.empty:
        console.print(benchmark_table([Path(str(f)) for f in bench["bench_file"]]))


# Headline numbers a result file may hold at its top level (dotted = nested), with their labels.
_HEADLINES = (
    ("load_ms_p50", "load p50 {:.3g} ms"),
    ("ratio", "loads {:,.0f}x faster than a rebuild"),
    ("build_s", "build {:.3g} s"),
    ("fps", "{:.4g} fps"),
    ("forward_speedup_vs_stock", "forward {:.3g}x stock"),
    ("render.render_speedup_vs_stock", "render {:.3g}x stock"),
    ("render.ours.end_to_end_s", "end to end {:.4g} s"),
    ("infill_psnr_db", "infill {:.3g} dB"),
    ("infill_face_psnr_db", "face {:.3g} dB"),
    ("infill_ms_per_frame_cpu", "{:.4g} ms/frame CPU"),
    ("forward_speedup_vs_stock_sparse50", "sparse attention 0.5 (experimental): forward {:.3g}x stock"),
    ("forward_speedup_vs_stock_sparse30", "0.3: {:.3g}x"),
    ("clip_120f_720p_s", "120-frame clip {:.3g} s"),
    ("clip_120f_720p_s_stock", "stock {:.4g} s"),
    ("clip_speedup_vs_stock", "{:.3g}x stock"),
    ("clip_120f_720p_s_experimental", "with approximations (experimental) {:.3g} s"),
    ("queue.throughput_ratio", "batch queue pipelined {:.3g}x serial"),
    ("subprocess_overhead_s_per_step", "subprocess launcher: +{:.2g} s per render step"),
    ("warp.aggregate.pck_body.mean", "warp pose pck (head, torso, arms) mean {:.3f}"),
    ("warp.aggregate.motion_energy_ratio.mean", "motion energy mean {:.3f}"),
    ("warp.aggregate.rigid_control.pck_body_mean", "a perfect rigid render (the judge's ceiling) pck {:.3f}"),
    ("pck_body_mean.raw", "perfect rigid renders read as stills: pck {:.3f}"),
    ("pck_body_mean.one_euro", "readings One-Euro-smoothed: {:.3f}"),
    ("wan_animate_tiny.render.pose_fidelity.pck_body", "wan-animate tiny (random weights) pck {:.3f}"),
    ("forward.extract_speedup_vs_stock", "wan-animate-2 extract pass {:.3g}x stock"),
    ("forward.cached_cond_speedup_vs_stock", "cached forward {:.3g}x stock"),
    ("attention.incontext_fp8_triton.speedup_vs_stock", "cached-pass attention in one 8-bit kernel launch {:.3g}x the stock flex mask"),
    ("attention.incontext_fp8_triton.rel_err_vs_stock", "error {:.3f}"),
    ("attention.split_fp8_triton.speedup_vs_stock", "cached-pass attention split on the 8-bit kernel {:.3g}x the stock flex mask"),
    ("attention.split_fp8_triton.rel_err_vs_stock", "error {:.3f}"),
    ("animate2_clip_s", "wan-animate-2 120-frame clip {:.4g} s"),
    ("animate2_clip_segment_frames", "in segments of {:.0f} frames"),
    ("animate2_clip_s_stock", "stock distilled pipeline {:.4g} s"),
    ("animate2_clip_speedup_vs_stock", "{:.3g}x stock"),
    ("animate2_clip_peak_gib", "peak {:.3g} GiB"),
    ("ours.peak_gib", "peak {:.3g} GiB"),
    ("animate2_clip_peak_gib_stock", "stock peak {:.4g} GiB"),
    ("ours.profile_one_forward.forward_ms", "one cached forward {:.5g} ms"),
    ("ours.profile_one_forward.gpu_busy_ms", "GPU busy {:.5g} ms"),
    ("animate2_clip_s_cold_loop", "K/V extracted inside the clip {:.4g} s"),
    ("animate2_clip_speedup_vs_stock_cold_loop", "{:.3g}x stock"),
    ("multistream.two_streams.throughput_vs_serial", "A/B on two CUDA streams {:.3g}x serial"),
    ("multistream.two_processes.throughput_vs_serial", "two processes {:.3g}x serial"),
    ("multistream.two_streams.peak_gib", "peak {:.3g} GiB"),
    ("portraits.astronaut.medium.before.halo_width_px", "astronaut matte halo {:.2f} px"),
    ("portraits.astronaut.medium.after.halo_width_px", "cleaned {:.2f} px"),
)


def _number(value: Any) -> float | None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value == value
    return float(value) if ok else None


def _dig(result: dict, dotted: str) -> Any:
    for part in dotted.split("."):
        if not isinstance(result, dict):
            return None
        result = result.get(part)
    return result


def key_figures(result: dict) -> list[str]:
    """The few numbers that say what one benchmark result file found, read from its JSON;
    ``[]`` for a file of a shape this does not know (the table leaves such rows out)."""
    figures = [label.format(v) for key, label in _HEADLINES if (v := _number(_dig(result, key))) is not None]
    configs, cudnn_ms = result.get("configs"), _number(result.get("cudnn_ms"))
    if isinstance(configs, dict) and cudnn_ms:  # an attention kernel sweep
        timed = {name: c for name, c in configs.items() if isinstance(c, dict) and _number(c.get("kernel_ms"))}
        if timed:
            name, best = min(timed.items(), key=lambda item: item[1]["kernel_ms"])
            err = _number(best.get("rel_err_vs_cudnn"))
            figures.append(
                f"best {name} {best['kernel_ms']:.1f} ms vs cuDNN {cudnn_ms:.1f} ms "
                f"({cudnn_ms / best['kernel_ms']:.2f}x" + (f", error {err:.3f})" if err is not None else ")")
            )
    kernels = result.get("kernels")
    if isinstance(kernels, dict):  # the SASS report: the default variant's kernels, one per autotune config
        from newsmotion_engine.accel.attention import DEFAULT_FP8_VARIANT

        rows = [k for name, k in kernels.items() if name.split()[0] == DEFAULT_FP8_VARIANT and isinstance(k, dict)]
        per_score = [v for k in rows if (v := _number(k.get("instructions_per_score"))) is not None]
        if per_score:
            spilled = max(_number(k.get("stack_bytes")) or 0 for k in rows)
            figures.append(
                f"{DEFAULT_FP8_VARIANT} (default): {min(per_score):.2f}-{max(per_score):.2f} main-loop "
                f"instructions per score over {len(per_score)} configs, {spilled:.0f} B spilled"
            )
    completed, expected = _number(result.get("renders_completed")), _number(result.get("expected_renders"))
    if completed is not None and expected:  # the fault test (bench/faults.py)
        left = result.get("temp_files_left")
        recover = _number(result.get("time_to_recover_s"))
        figures.append(
            f"fault test: {completed:.0f}/{expected:.0f} renders after a killed worker, daemon and restart, "
            f"{len(left) if isinstance(left, list) else '?'} temp files left, {_number(result.get('runs_retried')) or 0:.0f} runs retried"
            + (f", all recorded {recover:.0f} s after the restart" if recover is not None else "")
        )
    frames, wall_s, backend = _number(result.get("frames")), _number(result.get("wall_s")), result.get("backend")
    if frames and wall_s is not None and isinstance(backend, dict):  # a whole clip through one backend (smoke run)
        accels = backend.get("accelerations")
        figures.append(
            f"{frames:.0f} frames end to end in {wall_s:.3g} s ({backend.get('weights', 'weights unknown')}, "
            f"preset {backend.get('preset', '?')}"
            + (f", {len(accels)} accelerations)" if isinstance(accels, dict) else ")")
        )
    blocks = result.get("variants") if result.get("part") == "kernels" else None
    if isinstance(blocks, dict):  # bench/animate2_kernels.py: one block's forward per compile setting
        timed = [f"{name} {ms:.1f} ms" for name, v in blocks.items()
                 if isinstance(v, dict) and (ms := _number(v.get("forward_ms_per_block"))) is not None]  # fmt: skip
        if timed:
            figures.append("cached forward per block: " + ", ".join(timed))
    rows = result.get("rows_kernel")
    if isinstance(rows, dict):  # the one-pass FP8 row quantization vs inductor's, per input shape
        for shape, r in rows.items():
            ours = {k: ms for k, v in r.items() if isinstance(v, dict) and k != "inductor" and (ms := _number(v.get("ms"))) is not None}
            ind = _number(_dig(r, "inductor.ms"))
            if ours and ind is not None:
                best = min(ours, key=ours.get)
                figures.append(f"row quantization {shape}: {ours[best]:.3g} ms ({best}) vs inductor {ind:.3g} ms")
    if result.get("part") == "attention-prep":  # bench/animate2_kernels.py --prep-only
        ours, compiled = _number(_dig(result, "kernels.ms")), _number(_dig(result, "torch_compiled.ms"))
        if ours is not None and compiled is not None:
            q8 = _number(_dig(result, "vs_torch.q8.differ"))
            figures.append(f"attention prep {ours:.3g} ms vs torch compiled {compiled:.3g} ms"
                           + (f", {q8:.2g} of Q's 8-bit values differ" if q8 is not None else ""))
    if result.get("part") == "attention-soak":  # bench/animate2_kernels.py --soak
        first, last, smi = _number(result.get("first_tenth_ms")), _number(result.get("last_tenth_ms")), result.get("smi")
        if first is not None and last is not None:
            clocks = [c for s in smi if isinstance(s, dict) and (c := _number(s.get("sm_mhz"))) is not None] if isinstance(smi, list) else []
            figures.append(f"attention kernel back to back: {first:.1f} ms first tenth, {last:.1f} ms last tenth"
                           + (f", SM clock {min(clocks):.0f}-{max(clocks):.0f} MHz" if clocks else ""))
    decode = result.get("variants") if result.get("part") == "decode" else None
    if isinstance(decode, dict):  # bench/animate2_kernels.py --decode-only: one segment's VAE decode per setting
        timed = [f"{name} {ms / 1000:.2f} s" for name, v in decode.items()
                 if isinstance(v, dict) and (ms := _number(v.get("ms"))) is not None]  # fmt: skip
        if timed:
            figures.append("VAE decode of one segment: " + ", ".join(timed))
    if result.get("benchmark") == "chroma" and isinstance(result.get("portraits"), dict):
        # bench/chroma.py: per persona and frame, the raw frame keyed vs the green-screen composite
        frames = [f for p in result["portraits"].values() if isinstance(p, dict) for f in p.values() if isinstance(f, dict)]
        def spread(stage: str, key: str) -> str | None:
            values = [v for f in frames if (v := _number(_dig(f, f"{stage}.{key}"))) is not None]
            return f"{min(values):.3f}-{max(values):.3f}" if values else None
        exact, iou_before, iou_after = spread("after", "exact_background"), spread("before", "iou"), spread("after", "iou")
        if exact and iou_before and iou_after:
            figures.append(f"green screen of generated-like frames: background exact key {exact}, "
                           f"matte iou {iou_before} raw -> {iou_after}")
    cases = result.get("cases") if result.get("bench") == "cuda_stream_decode_check" else None
    if isinstance(cases, list) and cases:  # bench/cuda_stream_decode_check.py
        diffs = [d for c in cases if isinstance(c, dict) and (d := _number(c.get("max_abs_diff_u8"))) is not None]
        figures.append(f"streamed vs whole VAE decode on {result.get('device', '?')}: max |diff| "
                       f"{max(diffs) if diffs else float('nan'):.0f}/255 over {len(cases)} cases")
    variants = _dig(result, "forward.variants")
    if isinstance(variants, dict) and _number(_dig(result, "forward_speedup_vs_stock")) is None:
        # A forward run without the stock baseline (e.g. CUDA graphs vs eager): its own times.
        timed = [f"{name} {ms / 1000:.2f} s" for name, v in variants.items()
                 if isinstance(v, dict) and (ms := _number(v.get("forward_ms"))) is not None]  # fmt: skip
        if timed:
            figures.append("per forward: " + ", ".join(timed))
    return figures


def benchmark_table(paths: list[Path]) -> Table:
    """One row per benchmark result file with its :func:`key_figures`; files that cannot be read
    or hold no known figure are left out rather than shown with an empty cell."""
    table = Table("benchmark (committed results)", "key figures")
    for path in paths:
        try:
            result = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        figures = key_figures(result) if isinstance(result, dict) else []
        if figures:
            table.add_row(path.name, "; ".join(figures))
    return table


def main() -> None:
    try:
        run_demo()
    except NewsmotionError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
