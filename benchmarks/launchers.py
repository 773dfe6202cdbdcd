"""What a launcher costs per render step: the demo's 7 warp renders (720x1280, 120 frames each)
materialized through Dagster with ``launcher="in-process"`` and ``launcher="subprocess"``, in a
private storage root (caches built once first); the clips are deleted between launchers, so each
renders all 7.

    python -m benchmarks.launchers --json benchmarks/results/launchers.json

Per launcher: each render step's wall time (Dagster step start to success, as ``dagster.materialize``
sees it) and the mean; the difference is the engine process's start, imports and backend load.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from datetime import datetime, timezone
from pathlib import Path

import dagster as dg

warnings.filterwarnings("ignore")

from newsmotion_assets.assets.guidance import guidance_cache  # noqa: E402
from newsmotion_assets.assets.persona import persona_cache  # noqa: E402
from newsmotion_assets.assets.render import render  # noqa: E402
from newsmotion_assets.launchers import LAUNCHER_ENV  # noqa: E402
from newsmotion_assets.partitions import loop_partitions, persona_partitions  # noqa: E402
from newsmotion_assets.resources import RendererResource, StorageResource, release_warm_backends  # noqa: E402
from benchmarks.lab_record import running_command
from newsmotion_engine.bench.common import cpu_device  # noqa: E402
from newsmotion_engine.bench.record import BenchResult, write_result  # noqa: E402
from newsmotion_engine.bench.suites import sample_portrait  # noqa: E402
from newsmotion_engine.guidance.cache import all_loop_ids  # noqa: E402
from newsmotion_engine.persona.sources import install_source  # noqa: E402
from newsmotion_engine.render.telemetry import RenderTelemetry  # noqa: E402
from newsmotion_engine.storage import Storage  # noqa: E402

QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}


def run(json_path: Path | None) -> dict:
    if os.environ.get(LAUNCHER_ENV):
        sys.exit(f"unset {LAUNCHER_ENV}: this benchmark sets the launcher itself")
    with tempfile.TemporaryDirectory(prefix="newsmotion-launchers-") as root, dg.instance_for_test() as instance:
        store = Storage(root)
        storage = {"storage": StorageResource(root=root)}
        loops = all_loop_ids(store)
        install_source(store, sample_portrait(store.persona_samples), "astronaut")
        instance.add_dynamic_partitions(loop_partitions.name, loops)
        instance.add_dynamic_partitions(persona_partitions.name, ["astronaut"])
        for loop in loops:
            dg.materialize([guidance_cache], partition_key=loop, instance=instance, resources=storage, run_config=QUIET)
        dg.materialize([persona_cache], partition_key="astronaut", instance=instance, resources=storage, run_config=QUIET)
        result: dict = {
            "benchmark": "launchers",
            "what": "7 warp renders 720x1280x120 through dagster.materialize, one run per render",
            "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
            "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            # The 1-minute load average before and after: on a shared machine it says how much of a
            # difference is the launcher and how much is the neighbours.
            "load_average_1min": {"start": round(os.getloadavg()[0], 2)},
            "launchers": {},
        }
        for launcher in ("in-process", "subprocess"):
            shutil.rmtree(store.renders_root, ignore_errors=True)
            resources = {"renderer": RendererResource(launcher=launcher, keep_warm=True), **storage}
            steps, render_s = [], []
            for loop in loops:
                key = dg.MultiPartitionKey({"persona": "astronaut", "loop": loop})
                t0 = time.perf_counter()
                out = dg.materialize([render], partition_key=key, instance=instance, resources=resources, run_config=QUIET)
                steps.append(round(time.perf_counter() - t0, 3))
                tele = RenderTelemetry.read(store.render_path("astronaut", loop, "warp").with_suffix(".json"))
                assert out.success and tele.outcome == "rendered"
                render_s.append(tele.wall_s)
            release_warm_backends()
            result["launchers"][launcher] = {
                "telemetry_launcher": tele.launcher,
                "step_s": steps,
                "step_s_mean": round(statistics.mean(steps), 3),
                "render_wall_s_mean": round(statistics.mean(render_s), 3),
                "total_s": round(sum(steps), 2),
            }
            print(f"{launcher}: steps {steps} (mean {statistics.mean(steps):.2f} s)", flush=True)
        result["load_average_1min"]["end"] = round(os.getloadavg()[0], 2)
        ours = result["launchers"]
        result["subprocess_overhead_s_per_step"] = round(ours["subprocess"]["step_s_mean"] - ours["in-process"]["step_s_mean"], 3)
    if json_path is not None:
        write_result(json_path, BenchResult.now(
            json_path.stem, device=cpu_device(), command=running_command(), data=result,
            title="the demo's 7 warp renders through dagster.materialize: in-process vs a Pipes subprocess per step",
            headline={"step, in-process (s)": ours["in-process"]["step_s_mean"], "step, subprocess (s)": ours["subprocess"]["step_s_mean"],
                      "subprocess overhead per step (s)": result["subprocess_overhead_s_per_step"]},
        ))  # fmt: skip
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path)
    print(json.dumps(run(parser.parse_args().json), indent=2))
