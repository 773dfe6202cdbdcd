"""Where the engine runs for a render or a benchmark step: in the Dagster process, or in a process
of its own started through Dagster Pipes — a subprocess here, a Kubernetes GPU pod in production.

The renderer resource's ``launcher`` picks one; ``$NEWSMOTION_LAUNCHER`` overrides it for a whole
run (``NEWSMOTION_LAUNCHER=subprocess make demo``):

- ``in-process``: the backend is loaded in the Dagster step's process (the demo's default).
- ``subprocess``: ``PipesSubprocessClient`` runs ``python -m newsmotion_engine.pipes ...`` on this
  machine; the Dagster process never imports torch for the render.
- ``k8s``: ``PipesK8sClient`` (dagster-k8s) runs the same command in one pod per step, built from
  :class:`K8sPodConfig`: image, ``nvidia.com/gpu`` limit, node selector, tolerations and the
  shared storage volume (docs/DEPLOYMENT.md).

The engine reports back through Pipes (see :mod:`newsmotion_engine.pipes`): log lines, the
materialization metadata (render telemetry, bench results) and check results. A failed engine
process fails the step with the engine's own one-line error, re-raised as the same
:class:`~newsmotion_engine.errors.NewsmotionError` class (so ``BadInputError`` stays one).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import dagster as dg

from newsmotion_engine.errors import NewsmotionError, error_from_record
from newsmotion_engine.storage import Storage

LAUNCHER_ENV = "NEWSMOTION_LAUNCHER"
# The resource's setting -> what the render's telemetry records (RenderTelemetry.launcher).
LAUNCHERS = {"in-process": "in-process", "subprocess": "pipes-subprocess", "k8s": "pipes-k8s"}
ENGINE_MODULE = "newsmotion_engine.pipes"
# The container Pipes talks to (the first of the pod); named so `kubectl logs` reads well.
ENGINE_CONTAINER = "newsmotion-engine"
STORAGE_VOLUME = "newsmotion-storage"


class EngineProcessError(RuntimeError):
    """The engine process failed with an error that is not a user error (a bug, an out-of-memory
    kill, a pod that could not start): its first line, or the launcher's own message."""


def resolve_launcher(setting: str) -> str:
    """``$NEWSMOTION_LAUNCHER`` when set, else ``setting``; one of :data:`LAUNCHERS`."""
    value = os.environ.get(LAUNCHER_ENV, "").strip() or setting
    if value not in LAUNCHERS:
        where = f"${LAUNCHER_ENV}" if os.environ.get(LAUNCHER_ENV, "").strip() else "the renderer resource's launcher"
        raise NewsmotionError(f"{where} is {value!r}; choose one of {', '.join(LAUNCHERS)}")
    return value


class K8sPodConfig(dg.Config):
    """The one pod the ``k8s`` launcher starts per render or benchmark step.

    ``image`` must hold this repository installed from ``requirements.lock`` (the engine runs as
    ``python -m newsmotion_engine.pipes``). ``gpus`` becomes the container's ``nvidia.com/gpu``
    limit (0: a CPU pod); ``node_selector`` and ``tolerations`` put it on the GPU node pool.
    ``storage_claim`` is a ReadWriteMany PersistentVolumeClaim holding the storage root, mounted at
    ``storage_mount_path`` (the Dagster run pods mount the same claim; see docs/DEPLOYMENT.md).
    """

    image: str = "ghcr.io/newsroom/newsmotion:latest"
    image_pull_policy: str = "IfNotPresent"
    namespace: str | None = None  # None: the current namespace in cluster, else "default"
    gpus: int = 1
    node_selector: dict[str, str] = {"nvidia.com/gpu.present": "true"}
    tolerations: list[dict[str, str]] = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    cpu: str = "8"
    memory: str = "96Gi"
    storage_claim: str = "newsmotion-storage"
    storage_mount_path: str = "/storage"
    service_account_name: str | None = None
    env: dict[str, str] = {}  # e.g. {"NEWSMOTION_MODEL_DIR": "/storage/models/Wan2.2-Animate-14B-Diffusers"}
    load_incluster_config: bool | None = None  # None: in cluster when $KUBERNETES_SERVICE_HOST is set


def k8s_pod_spec(config: K8sPodConfig) -> dict[str, Any]:
    """The pod spec (snake_case, as dagster-k8s and the kubernetes client's models take it) for
    the engine container: image, resources with the ``nvidia.com/gpu`` limit, node selector,
    tolerations, the storage volume, ``NEWSMOTION_STORAGE`` pointing at its mount."""
    limits = {"cpu": config.cpu, "memory": config.memory}
    if config.gpus:
        limits["nvidia.com/gpu"] = str(config.gpus)
    env = {"NEWSMOTION_STORAGE": config.storage_mount_path, **config.env}
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": ENGINE_CONTAINER,
                "image": config.image,
                "image_pull_policy": config.image_pull_policy,
                # Requests equal limits: the scheduler reserves the whole GPU node share up front.
                "resources": {"limits": limits, "requests": dict(limits)},
                "env": [{"name": k, "value": v} for k, v in env.items()],
                "volume_mounts": [{"name": STORAGE_VOLUME, "mount_path": config.storage_mount_path}],
            }
        ],
        "volumes": [{"name": STORAGE_VOLUME, "persistent_volume_claim": {"claim_name": config.storage_claim}}],
        "node_selector": dict(config.node_selector),
        "tolerations": [dict(t) for t in config.tolerations],
        "restart_policy": "Never",  # a failed render fails the step; Dagster decides about retries
    }
    if config.service_account_name:
        spec["service_account_name"] = config.service_account_name
    return spec


@dataclass
class EngineResult:
    """What an engine process reported through Pipes: its materialization metadata (raw values),
    check results and log-worthy extras."""

    metadata: dict[str, Any] = field(default_factory=dict)
    checks: list[dg.AssetCheckResult] = field(default_factory=list)


class _RemembersHandler:
    """Mixin for a Pipes message reader: keeps the session's message handler, so the engine's
    error record (a custom message) can still be read after the client raised on the exit code."""

    handler: Any = None

    @contextmanager
    def read_messages(self, handler):
        self.handler = handler
        with super().read_messages(handler) as params:  # type: ignore[misc]
            yield params


class _TempFileReader(_RemembersHandler, dg.PipesTempFileMessageReader):
    pass


def run_engine(
    context: dg.AssetExecutionContext,
    launcher: str,
    engine_args: Callable[[Storage], list[str]],
    store: Storage,
    k8s: K8sPodConfig,
) -> EngineResult:
    """Run ``python -m newsmotion_engine.pipes <engine_args(storage as the engine sees it)>`` with
    ``launcher`` (``subprocess`` or ``k8s``) and return what it reported.

    Raises:
        NewsmotionError: the engine's own error (same class, same one line).
        EngineProcessError: the process failed otherwise (a bug: its first line; a kill).
    """
    if launcher == "subprocess":
        reader: Any = _TempFileReader()
        command = [sys.executable, "-m", ENGINE_MODULE, *engine_args(store)]
        run = lambda: dg.PipesSubprocessClient(message_reader=reader).run(context=context, command=command)  # noqa: E731
    elif launcher == "k8s":
        if str(store.root) != k8s.storage_mount_path:
            # Telemetry records the pod's paths; the asset reads the mp4 back at that path.
            context.log.warning(
                f"storage is {store.root} here but {k8s.storage_mount_path} in the engine pod: mount the volume at "
                "the same path in both (docs/DEPLOYMENT.md), or the render's metadata cannot read its clip"
            )
        reader, run = _k8s_run(context, engine_args(Storage(k8s.storage_mount_path)), k8s)
    else:
        raise ValueError(f"run_engine runs an engine process; launcher {launcher!r} is in-process")
    try:
        invocation = run()
    except NewsmotionError:
        raise
    except Exception as exc:
        record = _error_record(reader.handler)
        if record is None:
            text = str(exc).strip()
            raise EngineProcessError(f"{launcher} launcher: {text.splitlines()[0] if text else type(exc).__name__}") from exc
        raise (error_from_record(record) or EngineProcessError(record["message"])) from None
    result = EngineResult()
    for item in invocation.get_results(implicit_materializations=False):
        if isinstance(item, dg.AssetCheckResult):
            result.checks.append(item)
        elif isinstance(item, dg.MaterializeResult):
            result.metadata.update({k: getattr(v, "value", v) for k, v in (item.metadata or {}).items()})
    return result


def _error_record(handler) -> dict[str, Any] | None:
    if handler is None:
        return None
    for message in handler.get_custom_messages():
        if isinstance(message, dict) and isinstance(message.get("error"), dict):
            return message["error"]
    return None


def _k8s_run(context, args: list[str], config: K8sPodConfig):
    try:
        from dagster_k8s import PipesK8sClient, PipesK8sPodLogsMessageReader
    except ImportError as exc:
        raise NewsmotionError(f"the k8s launcher needs dagster-k8s (pinned in requirements.lock): {exc}") from None

    class _PodLogsReader(_RemembersHandler, PipesK8sPodLogsMessageReader):
        pass

    reader = _PodLogsReader()
    client = PipesK8sClient(message_reader=reader, load_incluster_config=config.load_incluster_config)

    def run():
        try:
            return client.run(
                context=context,
                command=["python", "-m", ENGINE_MODULE, *args],
                namespace=config.namespace,
                base_pod_spec=k8s_pod_spec(config),
                base_pod_meta={"labels": {"app.kubernetes.io/name": "newsmotion-engine"}},
            )
        except Exception as exc:
            import kubernetes

            if isinstance(exc, kubernetes.config.ConfigException):
                raise NewsmotionError(
                    f"k8s launcher: no Kubernetes configuration ({exc}); run inside the cluster or set a kubeconfig"
                ) from None
            raise

    return reader, run


class _ContextReport:
    """The engine's :class:`~newsmotion_engine.pipes.Report` for work run in the Dagster process:
    logs to the step's log; results are returned, not reported."""

    def __init__(self, context):
        self._log = context.log

    def log(self, message: str) -> None:
        self._log.info(message)

    def materialization(self, metadata, data_version) -> None:
        pass

    def check(self, name, passed, metadata) -> None:
        pass

    def error(self, record) -> None:
        pass


def context_report(context) -> _ContextReport:
    return _ContextReport(context)


def backend_args(
    command: Sequence[str], *, backend: str, options: dict[str, Any], width: int, height: int, fps: int,
    background: str, launcher: str, keyframes: int = 1, fidelity: bool = True, fidelity_stride: int = 4,
) -> Callable[[Storage], list[str]]:  # fmt: skip
    """The engine command line for ``command`` (``["render", "P/L", ...]`` or ``["prepare",
    "--kind", K, ID, ...]``) with the backend, its options and the spec; the storage root is the
    engine's view of it (a pod's mount path)."""
    import json

    def args(store: Storage) -> list[str]:
        return [
            command[0], "--storage", str(store.root), "--backend", backend, "--options", json.dumps(options, sort_keys=True),
            "--width", str(width), "--height", str(height), "--fps", str(fps), "--background", background,
            "--keyframes", str(keyframes), "--launcher", LAUNCHERS[launcher],
            *(([] if fidelity else ["--no-fidelity"]) + ["--fidelity-stride", str(fidelity_stride)] if command[0] == "render" else []),
            *command[1:],
        ]  # fmt: skip

    return args


def bench_args(suites: Sequence[str], gpu_preset: str | None) -> Callable[[Storage], list[str]]:
    """The engine's ``bench`` command line, results into the storage's bench folder."""

    def args(store: Storage) -> list[str]:
        return ["bench", "--out-dir", str(store.bench_dir), *suites, *(["--gpu-preset", gpu_preset] if gpu_preset else [])]

    return args


def iter_records(metadata: dict[str, Any]) -> Iterator[Any]:
    """The :class:`~newsmotion_engine.render.telemetry.RenderTelemetry` records an engine process
    reported as its ``telemetry`` metadata (validated by the record's own reader)."""
    import json

    from newsmotion_engine.render.telemetry import RenderTelemetry

    telemetry = metadata.get("telemetry")
    if not isinstance(telemetry, list):
        raise EngineProcessError("the engine process reported no render telemetry")
    for item in telemetry:
        yield RenderTelemetry.from_json(json.dumps(item), "<telemetry reported through Pipes>")
