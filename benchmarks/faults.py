"""Fault test of the whole Dagster deployment, as an operator would meet it (`make faults`).

Starts `dagster dev` (in its own process group, on a free port, with a private storage root and
Dagster instance configured like storage/dagster_home/dagster.yaml), drops portraits into the inbox,
then while renders run: SIGKILLs the run worker that is writing a clip (an out-of-memory kill);
with another render in flight, SIGKILLs the daemon and presses Ctrl-C twice on `dagster dev` (SIGINT
to the whole group, half a second apart); and starts it again. Nothing else is done by hand. It
then waits until every persona x loop render is materialized and reports:

- renders completed / expected (materialized in Dagster, mp4 on disk, valid h264, telemetry);
- runs retried by the daemon (runs tagged dagster/retry_number), runs failed;
- temporary files left anywhere under the storage root;
- time to recover: from the restart to the last render completed, and per interrupted clip the
  seconds from its fault until its render was recorded;
- run start-up cost: a render run's duration minus the render's own wall time (median).

Usage::

    python -m benchmarks.faults --portraits 2 --json benchmarks/results/faults.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import cv2
import psutil

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import dagster as dg  # noqa: E402

from benchmarks.lab_record import running_command
from newsmotion_engine.bench.common import cpu_device  # noqa: E402
from newsmotion_engine.bench.record import BenchResult, write_result  # noqa: E402
from newsmotion_engine.guidance.catalogue import LOOP_IDS  # noqa: E402
from newsmotion_engine.render.telemetry import RenderTelemetry  # noqa: E402
from newsmotion_engine.samples import astronaut_rgb  # noqa: E402
from newsmotion_engine.storage import Storage  # noqa: E402
from newsmotion_engine.sweep import temp_kind  # noqa: E402
from newsmotion_engine.video.encode import TEMP_NAME, probe_video  # noqa: E402

RENDER = dg.AssetKey("render")


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class DagsterDev:
    """`dagster dev` in its own session: a signal to the group reaches the webserver, the daemon and
    the code server (in the background it would ignore a SIGTERM sent to its pid only)."""

    def __init__(self, env: dict, port: int, log_path: Path):
        self.env, self.port, self.log_path = env, port, log_path
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 300) -> float:
        t0 = time.monotonic()
        exe = Path(sys.executable).with_name("dagster")
        out = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [str(exe), "dev", "-w", "workspace.yaml", "-h", "127.0.0.1", "-p", str(self.port)],
            cwd=REPO, env=self.env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        while time.monotonic() - t0 < timeout:
            if self.proc.poll() is not None:
                raise RuntimeError(f"dagster dev exited ({self.proc.returncode}); see {self.log_path}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/server_info", timeout=5):
                    return time.monotonic() - t0
            except OSError:
                time.sleep(2)
        raise RuntimeError(f"dagster dev did not answer on port {self.port} in {timeout:.0f} s")

    def processes(self) -> list[psutil.Process]:
        if self.proc is None:
            return []
        out = []
        for p in psutil.process_iter(["pid"]):
            try:
                if os.getsid(p.pid) == self.proc.pid:
                    out.append(p)
            except (OSError, psutil.Error):
                continue
        return out

    def daemon(self) -> psutil.Process | None:
        for p in self.processes():
            try:
                cmd = " ".join(p.cmdline())
            except psutil.Error:
                continue
            if ("dagster-daemon" in cmd or "dagster._daemon" in cmd) and " run" in cmd:
                return p
        return None

    def stop(self, interrupts: int = 0, timeout: float = 90) -> float:
        """Stop it: ``interrupts`` SIGINTs to the whole group half a second apart (Ctrl-C in the
        terminal, pressed that many times), else SIGTERM; SIGKILL after ``timeout``."""
        assert self.proc is not None
        t0 = time.monotonic()
        try:
            if interrupts:
                for i in range(interrupts):
                    os.killpg(self.proc.pid, signal.SIGINT)
                    if i + 1 < interrupts:
                        time.sleep(0.5)
            else:
                os.killpg(self.proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        # Whatever of the group outlived its parent (a run worker finishing up) gets a grace period.
        deadline = time.monotonic() + 30
        while self.processes() and time.monotonic() < deadline:
            time.sleep(1)
        for p in self.processes():
            p.kill()
        return time.monotonic() - t0


def drop_portraits(store: Storage, count: int) -> list[str]:
    """``count`` different portraits of the sample astronaut (mirrored, shifted), copied into the
    inbox the way a person would (a plain file copy)."""
    store.persona_inbox.mkdir(parents=True, exist_ok=True)
    rgb = astronaut_rgb()
    ids = []
    for i in range(count):
        img = rgb[:, ::-1] if i % 2 else rgb
        img = cv2.copyMakeBorder(img, 8 * (i // 2), 0, 0, 0, cv2.BORDER_REPLICATE)
        name = f"anchor{i + 1}"
        cv2.imwrite(str(store.persona_inbox / f"{name}.png"), cv2.cvtColor(img, cv2.COLOR_RGB2BGR))
        ids.append(name)
    return ids


def writing_clip(store: Storage) -> Path | None:
    """The temporary mp4 a render is writing now (with some frames in it), if any."""
    root = store.renders_root
    if not root.is_dir():
        return None
    for path in root.rglob(".*.tmp.mp4"):
        try:
            if path.stat().st_size > 20_000:
                return path
        except OSError:
            continue
    return None


def wait_for(what: str, fn, timeout: float, poll: float = 0.5):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        value = fn()
        if value:
            return value
        time.sleep(poll)
    raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}")


def completed_renders(store: Storage, instance: dg.DagsterInstance, personas: list[str]) -> list[str]:
    materialized = instance.get_materialized_partitions(RENDER)
    done = []
    for persona in personas:
        for loop in LOOP_IDS:
            key = str(dg.MultiPartitionKey({"persona": persona, "loop": loop}))
            mp4 = store.render_path(persona, loop, "warp")
            if key in materialized and mp4.is_file() and mp4.with_suffix(".json").is_file():
                done.append(key)
    return done


def valid_clip(mp4: Path) -> bool:
    try:
        info = probe_video(mp4)
        tele = RenderTelemetry.read(mp4.with_suffix(".json"))
    except Exception:  # noqa: BLE001 - any unreadable clip counts as not completed
        return False
    return info["codec"] == "h264" and info["frames"] == tele.frames > 0


def temp_files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob(".*") if temp_kind(p.name))


def run_report(instance: dg.DagsterInstance, store: Storage) -> dict:
    runs = instance.get_run_records()
    renders = [r for r in runs if r.dagster_run.asset_selection and RENDER in r.dagster_run.asset_selection]
    overhead, render_wall = [], []
    for r in renders:
        run = r.dagster_run
        if run.status != dg.DagsterRunStatus.SUCCESS or not r.start_time or not r.end_time:
            continue
        part = run.tags.get("dagster/partition") or run.tags.get("dagster/asset_partition_range_start")
        if not part:
            continue
        dims = dict(zip(("loop", "persona"), part.split("|")))  # MultiPartitionKey: dimensions by name
        tele_path = store.render_path(dims["persona"], dims["loop"], "warp").with_suffix(".json")
        try:
            tele = RenderTelemetry.read(tele_path)
        except Exception:  # noqa: BLE001
            continue
        if tele.outcome == "rendered" and r.start_time <= _ts(tele.created_at) <= r.end_time + 5:
            overhead.append((r.end_time - r.start_time) - tele.wall_s)
            render_wall.append(tele.wall_s)
    status = lambda s: sum(r.dagster_run.status == s for r in runs)  # noqa: E731
    return {
        "runs": len(runs),
        "render_runs": len(renders),
        "runs_succeeded": status(dg.DagsterRunStatus.SUCCESS),
        "runs_failed": status(dg.DagsterRunStatus.FAILURE),
        "runs_retried": sum("dagster/retry_number" in r.dagster_run.tags for r in runs),
        "render_runs_bad_input": sum(r.dagster_run.tags.get("newsmotion/failure") == "bad_input" for r in renders),
        "render_run_overhead_s_median": round(statistics.median(overhead), 2) if overhead else None,
        "render_run_overhead_samples": len(overhead),
        "render_wall_s_median": round(statistics.median(render_wall), 2) if render_wall else None,
    }


def _ts(iso: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(iso).timestamp()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--portraits", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=1500, help="seconds to wait for recovery")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--keep", action="store_true", help="keep the temporary storage and instance")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="newsmotion-faults-"))
    store = Storage(work / "storage")
    home = work / "dagster_home"
    home.mkdir()
    shutil.copy(REPO / "storage" / "dagster_home" / "dagster.yaml", home / "dagster.yaml")
    env = {**os.environ, "DAGSTER_HOME": str(home), "NEWSMOTION_STORAGE": str(store.root), "PYTHONPATH": str(REPO)}
    os.environ.update({"DAGSTER_HOME": str(home)})
    dev = DagsterDev(env, free_port(), work / "dagster_dev.log")
    faults: list[dict] = []
    result: dict = {"portraits": args.portraits, "loops": len(LOOP_IDS), "expected_renders": args.portraits * len(LOOP_IDS)}
    t_start = time.monotonic()
    try:
        log(f"starting dagster dev on port {dev.port} (storage {store.root})")
        result["startup_s"] = round(dev.start(), 1)
        personas = drop_portraits(store, args.portraits)
        log(f"dropped {personas} into {store.persona_inbox}")
        instance = dg.DagsterInstance.from_config(str(home))

        # Fault 1: the run worker writing a clip is killed outright (as the OOM killer would).
        tmp = wait_for("a render writing its clip", lambda: writing_clip(store), 900)
        pid = int(TEMP_NAME.match(tmp.name)["pid"])
        os.kill(pid, signal.SIGKILL)
        faults.append({"fault": "SIGKILL run worker mid-clip", "pid": pid, "clip": str(tmp.parent.relative_to(store.root)), "t_s": round(time.monotonic() - t_start, 1)})
        log(f"killed run worker {pid} writing {tmp.name}")

        # Fault 2: with another render in flight, the daemon is killed, then dagster dev stopped.
        in_flight = wait_for("another render writing its clip", lambda: (c := writing_clip(store)) and c.name != tmp.name and c, 900)
        daemon = wait_for("the daemon process", dev.daemon, 60)
        daemon.kill()
        faults.append({"fault": "SIGKILL dagster-daemon", "pid": daemon.pid, "render_in_flight": str(in_flight.parent.relative_to(store.root)), "t_s": round(time.monotonic() - t_start, 1)})
        log(f"killed the daemon {daemon.pid} while {in_flight.name} was being written")
        time.sleep(2)
        exited_by_itself = dev.proc.poll() is not None
        stop_s = dev.stop(interrupts=2)
        faults.append({"fault": "Ctrl-C twice to dagster dev (SIGINT to the whole group)", "had_exited_after_daemon_kill": exited_by_itself, "stop_s": round(stop_s, 1), "t_s": round(time.monotonic() - t_start, 1)})
        log(f"stopped dagster dev with Ctrl-C twice in {stop_s:.1f} s (it had exited by itself: {exited_by_itself})")
        left_at_stop = temp_files(store.root)

        # Restart: nothing else is done by hand.
        t_restart = time.monotonic()
        dev.start()
        log("dagster dev restarted; waiting for every render")
        expected = result["expected_renders"]

        def all_done():
            done = completed_renders(store, instance, personas)
            busy = instance.get_run_records(filters=dg.RunsFilter(statuses=[dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.NOT_STARTED]))
            return len(done) == expected and not busy

        try:
            wait_for("all renders", all_done, args.timeout, poll=3)
            recovered = True
        except RuntimeError as exc:
            log(str(exc))
            recovered = False
        t_done = time.monotonic()
        # Per interrupted clip: seconds from its fault to its render being recorded.
        wall0 = time.time() - (time.monotonic() - t_start)
        for fault, clip in ((faults[0], tmp), (faults[1], in_flight)):
            persona, loop = clip.parent.parent.name, clip.parent.name
            key = str(dg.MultiPartitionKey({"persona": persona, "loop": loop}))
            records = instance.fetch_materializations(dg.AssetRecordsFilter(asset_key=RENDER, asset_partitions=[key]), limit=1).records
            fault["partition"] = key
            fault["rendered_again_after_s"] = round(records[0].timestamp - (wall0 + fault["t_s"]), 1) if records else None
        done = completed_renders(store, instance, personas)
        valid = [k for k in done if valid_clip(store.render_path(*_persona_loop(k), "warp"))]
        result.update(
            {
                "faults": faults,
                "temp_files_at_stop": len(left_at_stop),
                "renders_completed": len(valid),
                "renders_completed_pct": round(100 * len(valid) / expected, 1),
                "recovered_without_manual_step": recovered,
                # From the restart until every render was recorded (the interrupted ones and those
                # not yet started when dagster dev went down).
                "time_to_recover_s": round(t_done - t_restart, 1) if recovered else None,
                "temp_files_left": temp_files(store.root),
                "inbox_left": sorted(p.name for p in store.persona_inbox.iterdir() if p.is_file()) if store.persona_inbox.is_dir() else [],
                **run_report(instance, store),
            }
        )
    finally:
        if dev.proc is not None and dev.proc.poll() is None:
            dev.stop()
        result["wall_s"] = round(time.monotonic() - t_start, 1)
        result["measured_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        result["machine"] = f"{os.cpu_count()} CPU cores (shared), warp backend 720x1280"
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            result["work_dir"] = str(work)
    print(json.dumps(result, indent=2))
    if args.json:
        write_result(args.json, BenchResult.now(
            args.json.stem, device=cpu_device(), command=running_command(), data=result,
            title=f"fault test: {args.portraits} portraits x 7 warp renders under dagster dev; a killed run worker, "
                  "a killed daemon, Ctrl-C and restart",
            headline={"renders completed": f"{result.get('renders_completed')} / {result['expected_renders']}",
                      "temporary files left": len(result.get("temp_files_left") or []), "runs retried": result.get("runs_retried", 0),
                      "all recorded after the restart (s)": result.get("time_to_recover_s") or "not recovered"},
        ))  # fmt: skip
    ok = result.get("renders_completed") == result["expected_renders"] and not result.get("temp_files_left")
    return 0 if ok else 1


def _persona_loop(key: str) -> tuple[str, str]:
    dims = dict(zip(("loop", "persona"), key.split("|")))
    return dims["persona"], dims["loop"]


if __name__ == "__main__":
    raise SystemExit(main())
