"""The renderer's launchers through Dagster: renders in an engine process started with Dagster Pipes
(``subprocess``; ``k8s`` as far as it goes without a cluster), ``$NEWSMOTION_LAUNCHER``, errors."""

import dagster as dg
import pytest

from newsmotion_assets.assets.backend import backend_guidance_cache, backend_persona_cache
from newsmotion_assets.assets.guidance import guidance_cache
from newsmotion_assets.assets.persona import persona_cache
from newsmotion_assets.assets.render import render
from newsmotion_assets.assets.reports import benchmarks
from newsmotion_assets.launchers import LAUNCHER_ENV, K8sPodConfig, backend_args, k8s_pod_spec
from newsmotion_assets.partitions import loop_partitions, persona_partitions
from newsmotion_assets.resources import RendererResource, StorageResource, release_warm_backends
from newsmotion_engine.errors import CacheNotReadyError
from newsmotion_engine.persona.sources import install_source
from newsmotion_engine.render.telemetry import RenderTelemetry
from newsmotion_engine.storage import Storage
from newsmotion_engine.video.encode import probe_video

KEY = dg.MultiPartitionKey({"persona": "anchor", "loop": "nod"})
TINY = {"preset": "tiny", "steps": 1, "device": "cpu", "dtype": "float32"}


@pytest.fixture(autouse=True)
def _no_launcher_override(monkeypatch):
    monkeypatch.delenv(LAUNCHER_ENV, raising=False)
    yield
    release_warm_backends()


def _instance_with(instance, loops=("nod",)):
    instance.add_dynamic_partitions(loop_partitions.name, list(loops))
    instance.add_dynamic_partitions(persona_partitions.name, ["anchor"])
    return instance


def _caches(instance, loops=("nod",)):
    storage = {"storage": StorageResource()}
    for loop in loops:
        assert dg.materialize([guidance_cache], partition_key=loop, instance=instance, resources=storage).success
    assert dg.materialize([persona_cache], partition_key="anchor", instance=instance, resources=storage).success


def _resources(**renderer):
    return {"renderer": RendererResource(**renderer), "storage": StorageResource()}


def _logs(instance, run_id) -> list[str]:
    return [e.user_message for e in instance.all_logs(run_id) if e.user_message]


def _failure(result) -> str:
    return result.get_step_failure_events()[0].event_specific_data.error.to_string()


def test_subprocess_launcher_renders_warp_in_its_own_process(astronaut_png, storage):
    install_source(storage, astronaut_png, "anchor")
    resources = _resources(width=180, height=320, launcher="subprocess")
    with dg.instance_for_test() as instance:
        _caches(_instance_with(instance))
        result = dg.materialize([render], partition_key=KEY, instance=instance, resources=resources)
        assert result.success
        (mat,) = result.asset_materializations_for_node("render")
        mp4 = storage.render_path("anchor", "nod", "warp")
        tele = RenderTelemetry.read(mp4.with_suffix(".json"))
        assert tele.launcher == "pipes-subprocess" and tele.frames == 120
        assert probe_video(mp4)["frames"] == 120
        # The telemetry came back through Pipes: the asset's table and data version are built from it.
        row = mat.metadata["telemetry"].value.records[0].data
        assert row["launcher"] == "pipes-subprocess" and row["input_digest"] == tele.input_digest
        assert mat.tags["dagster/data_version"] == tele.input_digest
        logs = _logs(instance, result.run_id)
        # The engine's own progress lines, from another process, in the run's log.
        assert any(line.startswith("pipes-subprocess: loading backend warp (pid ") for line in logs)
        pid = next(line for line in logs if line.startswith("pipes-subprocess: loading")).split("pid ")[1].split(",")[0]
        assert int(pid) != __import__("os").getpid()
        assert "anchor x nod: 120/120 frames" in logs
        assert "[pipes] external process successfully opened dagster pipes." in logs

        # The backend cache step through the engine process gives the record (and data version)
        # the in-process step gives, so changing the launcher turns nothing stale.
        versions = []
        for res in (resources, _resources(width=180, height=320)):
            prepared = dg.materialize([backend_guidance_cache], partition_key="nod", instance=instance, resources=res)
            (pmat,) = prepared.asset_materializations_for_node("backend_guidance_cache")
            assert pmat.metadata["artifacts"].value == "warp needs no backend artifacts"
            versions.append(pmat.tags["dagster/data_version"])
        assert versions[0] == versions[1]

        # Unchanged inputs: the engine process skips it (the clip on disk is current).
        stamp = mp4.stat().st_mtime_ns
        again = dg.materialize([render], partition_key=KEY, instance=instance, resources=resources)
        (mat2,) = again.asset_materializations_for_node("render")
        assert mat2.metadata["skipped"].value == 1 and mp4.stat().st_mtime_ns == stamp


def test_a_multi_partition_run_renders_each_partition_in_an_engine_process(astronaut_png, storage):
    install_source(storage, astronaut_png, "anchor")
    keys = [dg.MultiPartitionKey({"persona": "anchor", "loop": loop}) for loop in ("nod", "welcome")]
    with dg.instance_for_test() as instance:
        _caches(_instance_with(instance, ("nod", "welcome")), ("nod", "welcome"))
        # A single-run backfill of both partitions (what BackfillPolicy.single_run launches).
        first, last = sorted(str(k) for k in keys)
        result = dg.materialize(
            [render], instance=instance, resources=_resources(width=180, height=320, launcher="subprocess"),
            tags={"dagster/asset_partition_range_start": first, "dagster/asset_partition_range_end": last},
        )  # fmt: skip
        assert result.success
        mats = result.asset_materializations_for_node("render")
        assert sorted(m.partition for m in mats) == sorted(str(k) for k in keys)
        logs = _logs(instance, result.run_id)
        # One engine process per partition (a clip's failure or kill stays that clip's).
        assert sum(line.startswith("pipes-subprocess: loading backend") for line in logs) == 2
    for loop in ("nod", "welcome"):
        assert RenderTelemetry.read(storage.render_path("anchor", loop, "warp").with_suffix(".json")).launcher == "pipes-subprocess"


def test_subprocess_launcher_renders_wan_animate_tiny(astronaut_png, storage):
    install_source(storage, astronaut_png, "anchor")
    resources = _resources(backend="wan-animate", options=TINY, width=64, height=128, launcher="subprocess")
    with dg.instance_for_test() as instance:
        _caches(_instance_with(instance))
        # The backend's sub-caches are built in an engine process too (torch never loads here).
        for asset, key in ((backend_guidance_cache, "nod"), (backend_persona_cache, "anchor")):
            built = dg.materialize([asset], partition_key=key, instance=instance, resources=resources)
            (mat,) = built.asset_materializations_for_node(asset.key.path[-1])
            assert mat.metadata["built"].value == 1 and mat.metadata["backend"].value == "wan-animate"
            assert any(line.startswith("pipes-subprocess: loading backend wan-animate") for line in _logs(instance, built.run_id))
        result = dg.materialize([render], partition_key=KEY, instance=instance, resources=resources)
        assert result.success
        (mat,) = result.asset_materializations_for_node("render")
        assert "random weights" in mat.metadata["weights"].value
    mp4 = storage.render_path("anchor", "nod", "wan-animate")
    tele = RenderTelemetry.read(mp4.with_suffix(".json"))
    assert probe_video(mp4)["frames"] == 120 and tele.launcher == "pipes-subprocess" and "random weights" in tele.weights


def test_failing_engine_process_fails_the_run_with_its_one_line_error(astronaut_png, storage):
    install_source(storage, astronaut_png, "anchor")
    with dg.instance_for_test() as instance:
        _instance_with(instance)  # no caches: the engine process refuses to render
        result = dg.materialize(
            [render], partition_key=KEY, instance=instance, resources=_resources(launcher="subprocess"), raise_on_error=False
        )
        assert not result.success
        failure = result.get_step_failure_events()[0].event_specific_data
        error = failure.error
        # The engine's error, as the same class (so it counts as bad input: not retried), not
        # "process failed with code 1".
        assert failure.user_failure_data.metadata["error_class"].value == "CacheNotReadyError"
        assert error.message.strip().endswith(
            "guidance cache for loop 'nod' is missing: materialize guidance_cache[nod] or run `newsmotion guidance build nod`"
        )
        assert "failed with code" not in error.message
        assert "guidance cache for loop 'nod' is missing" in " ".join(_logs(instance, result.run_id))
    folder = storage.render_path("anchor", "nod", "warp").parent
    assert not folder.exists() or list(folder.iterdir()) == []  # no mp4, no telemetry, no temp file


def test_engine_error_is_raised_as_the_engine_class(astronaut_png, storage):
    """Code that tells user errors from others (retries) sees the same class in both launchers."""
    install_source(storage, astronaut_png, "anchor")
    renderer = RendererResource(launcher="subprocess")
    with dg.instance_for_test() as instance:
        _instance_with(instance)

        @dg.asset(partitions_def=render.partitions_def)
        def probe(context: dg.AssetExecutionContext, renderer: RendererResource, storage: StorageResource):
            with pytest.raises(CacheNotReadyError, match="materialize guidance_cache"):
                list(renderer.render(context, storage.store, [("anchor", "nod")]))
            return dg.MaterializeResult()

        assert dg.materialize([probe], partition_key=KEY, instance=instance, resources={"renderer": renderer, "storage": StorageResource()}).success


def test_bad_backend_option_fails_the_run_with_its_one_line(astronaut_png, storage):
    install_source(storage, astronaut_png, "anchor")
    with dg.instance_for_test() as instance:
        _caches(_instance_with(instance))
        result = dg.materialize(
            [render], partition_key=KEY, instance=instance,
            resources=_resources(launcher="subprocess", options={"no_such_option": 1}), raise_on_error=False,
        )  # fmt: skip
        assert not result.success
        message = _failure(result)
        assert "no_such_option" in message and "failed with code" not in message
    assert not storage.render_path("anchor", "nod", "warp").exists()


def test_engine_process_dying_without_a_record_is_an_engine_process_error(storage):
    """A process that fails before it could report (here: a command line the entry point refuses,
    as a crash or a kill would) fails as EngineProcessError with the launcher's line."""
    from newsmotion_assets.launchers import EngineProcessError, run_engine

    @dg.asset
    def probe(context: dg.AssetExecutionContext):
        with pytest.raises(EngineProcessError, match="subprocess launcher: .*code 2"):
            run_engine(context, "subprocess", lambda store: ["no-such-command"], Storage(storage.root), K8sPodConfig())
        return dg.MaterializeResult()

    with dg.instance_for_test() as instance:
        assert dg.materialize([probe], instance=instance).success


def test_launcher_variable_overrides_the_resource_for_a_run(astronaut_png, storage, monkeypatch):
    install_source(storage, astronaut_png, "anchor")
    with dg.instance_for_test() as instance:
        _caches(_instance_with(instance))
        monkeypatch.setenv(LAUNCHER_ENV, "subprocess")
        assert dg.materialize([render], partition_key=KEY, instance=instance, resources=_resources(width=180, height=320)).success
        tele = RenderTelemetry.read(storage.render_path("anchor", "nod", "warp").with_suffix(".json"))
        assert tele.launcher == "pipes-subprocess"
        monkeypatch.setenv(LAUNCHER_ENV, "cloud")
        bad = dg.materialize([render], partition_key=KEY, instance=instance, resources=_resources(), raise_on_error=False)
        assert not bad.success
        assert any(
            "$NEWSMOTION_LAUNCHER is 'cloud'; choose one of in-process, subprocess, k8s" in str(e.event_specific_data)
            for e in bad.all_events
            if "FAILURE" in e.event_type_value
        )


def test_the_launcher_changes_where_not_what(astronaut_png, storage):
    """The same clip (byte for byte) and input digest in process and in an engine process; only
    the telemetry's launcher differs."""
    install_source(storage, astronaut_png, "anchor")
    mp4 = storage.render_path("anchor", "nod", "warp")
    seen = {}
    with dg.instance_for_test() as instance:
        _caches(_instance_with(instance))
        for launcher in ("in-process", "subprocess"):
            mp4.unlink(missing_ok=True)
            resources = _resources(width=180, height=320, launcher=launcher)
            assert dg.materialize([render], partition_key=KEY, instance=instance, resources=resources).success
            tele = RenderTelemetry.read(mp4.with_suffix(".json"))
            seen[tele.launcher] = (mp4.read_bytes(), tele.input_digest)
    assert set(seen) == {"in-process", "pipes-subprocess"}
    assert seen["in-process"] == seen["pipes-subprocess"]


def test_benchmarks_run_through_the_launcher(storage):
    with dg.instance_for_test() as instance:
        result = dg.materialize(
            [benchmarks], instance=instance, resources=_resources(launcher="subprocess"),
            run_config={"ops": {"benchmarks": {"config": {"suites": ["persona"]}}}},
        )  # fmt: skip
        assert result.success
        (mat,) = result.asset_materializations_for_node("benchmarks")
        assert mat.metadata["launcher"].value == "subprocess"
        assert mat.metadata["persona.build (s)"].value > 0  # the record's headline
        assert any(line.startswith("running bench suite persona") for line in _logs(instance, result.run_id))
    assert (storage.bench_dir / "persona.json").is_file()


# ---------------------------------------------------------------------------------------- k8s


def _pod(config: K8sPodConfig, pairs=(("anchor", "nod"),)):
    """The pod dagster-k8s builds from our spec (its own builder and the kubernetes client's models)."""
    from dagster_k8s.pipes import build_pod_body

    args = backend_args(
        ["render", *(f"{p}/{l}" for p, l in pairs)], backend="wan-animate", options={"fp8": True}, width=720, height=1280, fps=30, background="#00B140", launcher="k8s"
    )(Storage(config.storage_mount_path))
    return build_pod_body(
        pod_name="dagster-render-abc",
        image=None,
        command=["python", "-m", "newsmotion_engine.pipes", *args],
        env_vars={"DAGSTER_PIPES_CONTEXT": "x", "DAGSTER_PIPES_MESSAGES": "y"},
        base_pod_meta={"labels": {"app.kubernetes.io/name": "newsmotion-engine"}},
        base_pod_spec=k8s_pod_spec(config),
    )


def test_k8s_pod_spec_is_a_valid_gpu_pod():
    import kubernetes

    config = K8sPodConfig(
        image="registry.example/newsmotion:1.4", gpus=2, storage_claim="renders-rwx",
        env={"NEWSMOTION_MODEL_DIR": "/storage/models/wan"},
    )  # fmt: skip
    pod = _pod(config)
    assert isinstance(pod, kubernetes.client.V1Pod)
    body = kubernetes.client.ApiClient().sanitize_for_serialization(pod)  # what the API server receives
    spec = body["spec"]
    (container,) = spec["containers"]
    assert container["name"] == "newsmotion-engine" and container["image"] == "registry.example/newsmotion:1.4"
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "2"
    assert container["resources"]["requests"]["nvidia.com/gpu"] == "2"
    assert container["command"][:3] == ["python", "-m", "newsmotion_engine.pipes"]
    assert container["command"][3:6] == ["render", "--storage", "/storage"]
    assert container["command"][-1] == "anchor/nod" and "pipes-k8s" in container["command"]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["NEWSMOTION_STORAGE"] == "/storage" and env["NEWSMOTION_MODEL_DIR"] == "/storage/models/wan"
    assert env["DAGSTER_PIPES_CONTEXT"] == "x"  # the Pipes bootstrap the client adds
    assert container["volumeMounts"] == [{"name": "newsmotion-storage", "mountPath": "/storage"}]
    assert spec["volumes"] == [{"name": "newsmotion-storage", "persistentVolumeClaim": {"claimName": "renders-rwx"}}]
    assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert spec["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert spec["restartPolicy"] == "Never"
    assert body["metadata"]["labels"]["app.kubernetes.io/name"] == "newsmotion-engine"


def test_k8s_pod_spec_is_validated_by_dagster_k8s():
    """dagster-k8s checks every key against the kubernetes models: a typo does not reach a cluster."""
    from dagster_k8s.pipes import build_pod_body

    spec = k8s_pod_spec(K8sPodConfig())
    spec["node_selectr"] = {"pool": "gpu"}
    with pytest.raises(Exception, match="node_selectr"):
        build_pod_body("p", None, ["python"], {}, None, spec)
    cpu_pod = kubernetes_body(_pod(K8sPodConfig(gpus=0)))
    assert "nvidia.com/gpu" not in cpu_pod["spec"]["containers"][0]["resources"]["limits"]


def kubernetes_body(pod):
    import kubernetes

    return kubernetes.client.ApiClient().sanitize_for_serialization(pod)


def test_k8s_launcher_without_a_cluster_fails_with_one_line(astronaut_png, storage, tmp_path, monkeypatch):
    install_source(storage, astronaut_png, "anchor")
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with dg.instance_for_test() as instance:
        _caches(_instance_with(instance))
        result = dg.materialize(
            [render], partition_key=KEY, instance=instance, resources=_resources(launcher="k8s"), raise_on_error=False
        )
        assert not result.success
        assert "k8s launcher: no Kubernetes configuration" in _failure(result)
    assert not storage.render_path("anchor", "nod", "warp").exists()
