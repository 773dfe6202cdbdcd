"""``make demo``: the whole pipeline through Dagster, in process, on the embedded CPU default.

Materializes, with the same asset definitions the UI shows: every loop's guidance cache, the
sample persona (scikit-image's public-domain astronaut), every render persona x loop with the
``warp`` backend, then the scorecard; prints the scorecard and where the mp4s are. It ends with the
sample story (:data:`~newsmotion_engine.samples.SAMPLE_STORY`): the persona speaks two sentences
with two gestures, one mp4 with sound. Runs are
recorded in ``$DAGSTER_HOME`` (the Makefile points it at ``storage/dagster_home``), so
``make dev`` shows them afterwards as current and requests nothing on its first ticks (the sensors
and automation see the demo's materializations; a test checks it). The demo is an edge of the program: it decides the storage root
once (``$NEWSMOTION_STORAGE``, else ``./storage``) and hands it to every asset as the ``storage``
resource.
"""

import os
import sys
import time
import warnings
from pathlib import Path

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
from newsmotion_assets.assets.story import story
from newsmotion_assets.checks import guidance_cache_valid, persona_cache_valid
from newsmotion_assets.partitions import loop_partitions, persona_partitions, story_partitions
from newsmotion_assets.resources import RendererResource, StorageResource, release_warm_backends
from newsmotion_engine.bench.record import BenchResult, figure_text
from newsmotion_engine.bench.suites import sample_portrait
from newsmotion_engine.cachedir import copy_into_place
from newsmotion_engine.cli.console import PipeConsole
from newsmotion_engine.errors import NewsmotionError
from newsmotion_engine.guidance.cache import all_loop_ids
from newsmotion_engine.persona.sources import install_source
from newsmotion_engine.render.telemetry import RenderTelemetry, cell_text
from newsmotion_engine.samples import SAMPLE_STORY
from newsmotion_engine.storage import Storage
from newsmotion_engine.story.telemetry import StoryTelemetry
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
    console.print("[bold]1/5 guidance caches[/] (Tier 1, per loop, with the backend's loop-side cache)")
    instance.add_dynamic_partitions(loop_partitions.name, loops)
    for loop_id in loops:
        _materialize(
            [[guidance_cache, guidance_cache_valid], [backend_guidance_cache]], loop_id, instance, resources,
            label=f"guidance_cache[{loop_id}]",
        )

    console.print("[bold]2/5 persona cache[/] (Tier 2, the sample anchor, with the backend's persona-side cache)")
    sample = sample_portrait(store.persona_samples)
    install_source(store, sample, SAMPLE_PERSONA)
    instance.add_dynamic_partitions(persona_partitions.name, [SAMPLE_PERSONA])
    _materialize(
        [[persona_cache, persona_cache_valid], [backend_persona_cache]], SAMPLE_PERSONA, instance, resources,
        label=f"persona_cache[{SAMPLE_PERSONA}]",
    )

    launcher = resources["renderer"].active_launcher  # $NEWSMOTION_LAUNCHER, else in-process
    where = "backend loaded once" if launcher == "in-process" else f"launcher {launcher}: one engine process per render run"
    console.print(f"[bold]3/5 renders[/] (warp backend, 720x1280 @ 30 fps; {where}; unchanged clips skipped)")
    for loop_id in loops:
        key = dg.MultiPartitionKey({"persona": SAMPLE_PERSONA, "loop": loop_id})
        result = _materialize([[render]], key, instance, resources, label=f"render[{SAMPLE_PERSONA} x {loop_id}]")
        (mat,) = result.asset_materializations_for_node("render")
        if mat.metadata["skipped"].value:
            console.print("     current (same inputs as the clip on disk): not rendered again")
    release_warm_backends()

    console.print("[bold]4/5 scorecard[/]")
    result = dg.materialize([scorecard], instance=instance, resources=on_store, run_config=QUIET, raise_on_error=True)
    (mat,) = result.asset_materializations_for_node("scorecard")
    _print_scorecard(store)
    console.print(f"scorecard files: {mat.metadata['json'].value}, {mat.metadata['csv'].value}")
    console.print(f"mp4s: {store.renders_root / SAMPLE_PERSONA}/<loop>/warp.mp4")

    console.print("[bold]5/5 story[/] (the sample persona reads the sample story: speech, lips, two gestures, one mp4 with sound)")
    _render_sample_story(store, instance, resources)
    release_warm_backends()
    console.print(f"[bold]demo wall time: {time.perf_counter() - started:.1f} s[/]")


def _render_sample_story(store: Storage, instance: dg.DagsterInstance, resources: dict) -> None:
    """Put the sample story in ``stories/`` (as a newsroom would drop one) and materialize it."""
    target = store.stories_dir / SAMPLE_STORY.name
    if not (target.is_file() and target.read_bytes() == SAMPLE_STORY.read_bytes()):
        copy_into_place(SAMPLE_STORY, target)
    story_id = target.stem
    instance.add_dynamic_partitions(story_partitions.name, [story_id])
    key = dg.MultiPartitionKey({"persona": SAMPLE_PERSONA, "story": story_id})
    result = _materialize([[story]], key, instance, resources, label=f"story[{SAMPLE_PERSONA} x {story_id}]")
    (mat,) = result.asset_materializations_for_node("story")
    tele = StoryTelemetry.read(Path(mat.metadata["path"].value).with_suffix(".json"))
    sync, lips = tele.av_sync, tele.lip_sync
    sound = "AAC audio in sync" if sync["in_sync"] else f"audio OFF by {sync['offset_frames']} frames"
    lip_text = f"lip sync {lips['correlation']} at offset {lips['offset_frames']}" if lips else f"lip sync not measured ({tele.lip_sync_reason})"
    console.print(f"     {tele.output}: {tele.duration_s:.1f} s, {sound}, {escape(lip_text)}; largest joint move "
                  f"{tele.joins['max_jump_at_joins_px']} px at the joins vs {tele.joins['max_jump_inside_px']} px inside the loops")  # fmt: skip
    console.print("     play it with sound in any video player, or in the studio (`newsmotion studio build && newsmotion studio serve`)")


def _warn(message: str) -> None:
    console.print(f"[yellow]warning:[/] {escape(message)}")


def _print_scorecard(store: Storage) -> None:
    from newsmotion_engine.bench.scorecard import bench_results, bench_results_dir, build_scorecard

    frame = build_scorecard(store, on_skip=_warn)
    renders = frame[frame["kind"] == "render"]
    columns = RenderTelemetry.SUMMARY
    table = Table(*(c.replace("_", " ") for c in columns))
    for row in renders.to_dict("records"):
        table.add_row(*(escape(cell_text(row.get(c))) for c in columns))
    console.print(table)
    committed = bench_results([bench_results_dir()], on_skip=_warn)
    if committed:
        console.print(benchmark_table(committed))


# The benchmarks a newsroom reads first (at most 10 rows), in this order.
DEMO_BENCHMARKS = (
    "wan_animate_clip_h100", "wan_animate_2_clip_h200", "wan_animate_2_clip_h100", "warp", "guidance", "persona",
    "infill", "fidelity", "matte", "chroma",
)  # fmt: skip


def benchmark_table(results: list[BenchResult]) -> Table:
    """The :data:`DEMO_BENCHMARKS` among ``results``, one row each with its headline figures."""
    by_name = {r.name: r for r in results}
    table = Table("benchmark (committed results)", "device", "headline figures")
    for name in DEMO_BENCHMARKS:
        if (result := by_name.get(name)) is not None:
            table.add_row(result.name, result.device, "; ".join(f"{k} {figure_text(v)}" for k, v in result.headline.items()))
    return table


def main() -> None:
    try:
        run_demo()
    except NewsmotionError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
