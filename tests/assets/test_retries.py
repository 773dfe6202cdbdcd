"""Retries matched to the failure: a render run whose worker is killed mid-clip is retried by the
daemon's logic and completes with nothing done by hand; a transient error is retried by the step's
retry policy; bad input is never retried (not the step, not the run, not by automation)."""

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import dagster as dg
import pytest
from dagster._core.test_utils import create_run_for_test
from dagster._daemon.auto_run_reexecution.auto_run_reexecution import should_retry

from newsmotion_assets.assets.guidance import guidance_cache
from newsmotion_assets.assets.persona import persona_cache
from newsmotion_assets.assets.render import render
from newsmotion_assets.automation import RetryableFailureCondition
from newsmotion_assets.partitions import loop_partitions, persona_partitions, render_partitions
from newsmotion_assets.resources import RendererResource, StorageResource
from newsmotion_assets.retries import FAILURE_TAG
from newsmotion_engine.errors import BadInputError
from newsmotion_engine.persona.sources import install_source
from newsmotion_engine.render import job as job_module
from newsmotion_engine.render.telemetry import RenderTelemetry
from newsmotion_engine.video.encode import EncoderError, probe_video

REPO = Path(__file__).resolve().parents[2]
KEY = dg.MultiPartitionKey({"persona": "anchor", "loop": "nod"})
RUN_RETRIES = {"run_retries": {"enabled": True, "max_retries": 2, "retry_on_asset_or_op_failure": False}}

# The render job, importable by a second process (a reconstructable job, as a code server has).
JOB_MODULE = textwrap.dedent(
    """
    import dagster as dg
    from newsmotion_assets import assets
    from newsmotion_assets.assets.render import render
    from newsmotion_assets.partitions import render_partitions
    from newsmotion_assets.resources import RendererResource, StorageResource

    defs = dg.Definitions(
        assets=dg.load_assets_from_package_module(assets),
        jobs=[dg.define_asset_job("render_job", selection=[render], partitions_def=render_partitions)],
        resources={"renderer": RendererResource(width=180, height=320), "storage": StorageResource()},
        executor=dg.in_process_executor,
    )

    def render_job():
        return defs.resolve_job_def("render_job")
    """
)

# The run worker: renders slowly (so it can be killed mid-clip) and says where it is.
WORKER = textwrap.dedent(
    """
    import sys, time
    sys.path.insert(0, sys.argv[2])
    import dagster as dg
    import newsmotion_engine.video.encode as encode
    import render_job_module
    from newsmotion_assets.partitions import render_partitions

    write = encode.VideoEncoder.write
    def slow_write(self, frame):
        time.sleep(0.05)
        write(self, frame)
    encode.VideoEncoder.write = slow_write

    key = dg.MultiPartitionKey({"persona": "anchor", "loop": "nod"})
    tags = dict(render_partitions.get_tags_for_partition_key(key))
    with dg.DagsterInstance.from_config(sys.argv[1]) as instance:
        dg.execute_job(dg.reconstructable(render_job_module.render_job), instance, tags=tags)
    """
)


def _setup(instance, storage, astronaut_png):
    install_source(storage, astronaut_png, "anchor")
    instance.add_dynamic_partitions(loop_partitions.name, ["nod"])
    instance.add_dynamic_partitions(persona_partitions.name, ["anchor"])
    on_store = {"storage": StorageResource()}
    assert dg.materialize([guidance_cache], partition_key="nod", instance=instance, resources=on_store).success
    assert dg.materialize([persona_cache], partition_key="anchor", instance=instance, resources=on_store).success


def _retryable(instance) -> bool:
    return RetryableFailureCondition(3)._retryable(instance, render.key, str(KEY))


def _events(instance, run_id, kind):
    return [e for e in instance.all_logs(run_id) if e.dagster_event_type == kind]


def test_a_render_run_killed_mid_clip_is_retried_and_completes(astronaut_png, storage, tmp_path):
    home = tmp_path / "dagster_home"
    home.mkdir()
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "render_job_module.py").write_text(JOB_MODULE)
    with dg.instance_for_test(temp_dir=str(home), overrides=RUN_RETRIES) as instance:
        _setup(instance, storage, astronaut_png)
        clip_dir = storage.render_path("anchor", "nod", "warp").parent
        env = {**os.environ, "PYTHONPATH": str(REPO), "DAGSTER_HOME": str(home)}
        worker = subprocess.Popen(
            [sys.executable, "-c", WORKER, str(home), str(tmp_path / "jobs")],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 240
            while not any(p.name.endswith(".tmp.mp4") and p.stat().st_size > 0 for p in clip_dir.glob(".*")):
                assert worker.poll() is None, worker.stderr.read().decode()
                assert time.monotonic() < deadline, "the render never started writing its clip"
                time.sleep(0.1)
            os.killpg(worker.pid, signal.SIGKILL)  # as the out-of-memory killer would
            worker.wait()
        finally:
            if worker.poll() is None:
                os.killpg(worker.pid, signal.SIGKILL)
        (run,) = [r for r in instance.get_runs() if r.job_name == "render_job"]
        assert run.status == dg.DagsterRunStatus.STARTED  # nobody told the instance
        assert [p.name for p in clip_dir.glob(".*.tmp.mp4")]  # the partial clip is on disk

        # What the code server does when its run process vanishes, then the daemon's decision.
        instance.report_engine_event("Run execution process was terminated by signal 9 (SIGKILL).", run)
        instance.report_run_failed(run)
        failed = instance.get_run_by_id(run.run_id)
        assert should_retry(failed, instance)
        assert instance.get_run_by_id(run.run_id).tags["dagster/will_retry"] == "true"
        assert not _retryable(instance)  # the run retry is pending: automation leaves it to the daemon

        # The daemon's retry: re-execute from the failure (its default strategy) with the parent's
        # tags, as a new run of the same job.
        sys.path.insert(0, str(tmp_path / "jobs"))
        try:
            import render_job_module

            retried = dg.execute_job(
                dg.reconstructable(render_job_module.render_job),
                instance,
                reexecution_options=dg.ReexecutionOptions.from_failure(run.run_id, instance),
                tags={**run.tags, "dagster/retry_number": "1"},  # the daemon keeps the parent's tags
            )
        finally:
            sys.path.remove(str(tmp_path / "jobs"))
            sys.modules.pop("render_job_module", None)
        assert retried.success
        assert instance.get_run_by_id(retried.run_id).parent_run_id == run.run_id
        logs = [e.message for e in instance.all_logs(retried.run_id) if e.message]
        assert any("removed stale temporary video" in m and "its lock is free" in m for m in logs)
        mp4 = storage.render_path("anchor", "nod", "warp")
        assert sorted(p.name for p in clip_dir.iterdir()) == [".warp.mp4.lock", "warp.json", "warp.mp4"]
        assert probe_video(mp4)["frames"] == RenderTelemetry.read(mp4.with_suffix(".json")).frames == 120
        assert str(KEY) in instance.get_materialized_partitions(render.key)
        assert not _retryable(instance)


def test_bad_input_is_not_retried_by_the_step_the_run_or_automation(astronaut_png, storage, monkeypatch):
    def bad(store, persona_id, loop_id, backend, spec, **kw):
        raise BadInputError(store.render_path(persona_id, loop_id, backend.name), "output folder is not writable")

    monkeypatch.setattr(job_module, "render_persona_loop", bad)
    with dg.instance_for_test(overrides=RUN_RETRIES) as instance:
        _setup(instance, storage, astronaut_png)
        resources = {"renderer": RendererResource(width=180, height=320), "storage": StorageResource()}
        result = dg.materialize([render], partition_key=KEY, instance=instance, resources=resources, raise_on_error=False)
        assert not result.success
        (failure,) = result.get_step_failure_events()
        assert "output folder is not writable" in failure.event_specific_data.error.to_string()
        assert not _events(instance, result.run_id, dg.DagsterEventType.STEP_UP_FOR_RETRY)
        run = instance.get_run_by_id(result.run_id)
        assert run.tags[FAILURE_TAG] == "bad_input"
        assert not should_retry(run, instance)  # a step failure: run retries leave it alone
        assert not _retryable(instance)  # and automation does not request it again


def test_a_transient_render_error_is_retried_in_the_same_run(astronaut_png, storage, monkeypatch):
    real = job_module.render_persona_loop
    calls = []

    def flaky(store, persona_id, loop_id, backend, spec, **kw):
        calls.append(1)
        if len(calls) == 1:
            raise EncoderError(store.render_path(persona_id, loop_id, backend.name), "ffmpeg failed (killed by signal 9)")
        return real(store, persona_id, loop_id, backend, spec, **kw)

    monkeypatch.setattr(job_module, "render_persona_loop", flaky)
    with dg.instance_for_test(overrides=RUN_RETRIES) as instance:
        _setup(instance, storage, astronaut_png)
        resources = {"renderer": RendererResource(width=180, height=320), "storage": StorageResource()}
        result = dg.materialize([render], partition_key=KEY, instance=instance, resources=resources)
        assert result.success and len(calls) == 2
        assert len(_events(instance, result.run_id, dg.DagsterEventType.STEP_UP_FOR_RETRY)) == 1


@pytest.mark.parametrize("launched_by", ["run request", "backfill"])
@pytest.mark.parametrize("failed_runs, expected", [(1, True), (3, False)])
def test_automation_requests_a_crashed_render_again_until_it_gave_up(failed_runs, expected, launched_by, astronaut_png, storage):
    with dg.instance_for_test() as instance:
        _setup(instance, storage, astronaut_png)
        if launched_by == "backfill":  # a backfill's run names its partition as a one-key range
            tags = {"dagster/asset_partition_range_start": str(KEY), "dagster/asset_partition_range_end": str(KEY)}
        else:
            tags = dict(render_partitions.get_tags_for_partition_key(KEY))
        for _ in range(failed_runs):  # runs whose workers died, no run retry pending
            run = create_run_for_test(
                instance, job_name="__ASSET_JOB", tags=tags, asset_selection=frozenset({render.key}),
                status=dg.DagsterRunStatus.STARTED,
            )  # fmt: skip
            instance.report_run_failed(run)
            instance.add_run_tags(run.run_id, {"dagster/will_retry": "false"})
        assert _retryable(instance) is expected
