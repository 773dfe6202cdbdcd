"""The renderer resource: picks where renders run (its ``launcher``, see
:mod:`newsmotion_assets.launchers`) and, in process, owns the loaded backend (loaded in
``setup_for_execution``, once per process), so a single-run backfill or an in-process demo renders
many partitions warm."""

from __future__ import annotations

import atexit
import json
from collections.abc import Iterator, Sequence
from typing import Any

import dagster as dg
from pydantic import PrivateAttr

from newsmotion_assets.launchers import (
    EngineProcessError,
    K8sPodConfig,
    backend_args,
    bench_args,
    context_report,
    iter_records,
    resolve_launcher,
    run_engine,
)
from newsmotion_engine.render import Backend, RenderSpec, get_backend
from newsmotion_engine.render.prepare import PreparedCaches, prepare_backend_caches
from newsmotion_engine.render.telemetry import RenderTelemetry
from newsmotion_engine.render.fidelity import FidelityConfig
from newsmotion_engine.render.musetalk.config import MuseTalkOptions
from newsmotion_engine.storage import Storage
from newsmotion_engine.story.lips import story_lips


# Loaded backends by configuration, shared by every run in this process: loading (and, for
# diffusion backends, compiling) is paid once, then single-run backfills and in-process demos
# render many partitions warm.
_WARM: dict[str, Backend] = {}


def _key(backend: str, options: dict[str, Any]) -> str:
    return json.dumps([backend, options], sort_keys=True, default=str)


def release_warm_backends() -> None:
    """Close every process-wide backend (frees memory / VRAM)."""
    while _WARM:
        _WARM.popitem()[1].close()


atexit.register(release_warm_backends)


class StorageResource(dg.ConfigurableResource):
    """The storage root every asset, sensor and check reads and writes (resource key ``storage``).

    ``root`` unset: ``$NEWSMOTION_STORAGE``, else ``./storage`` (the Dagster layer is an edge of the
    program, so this is one of the few places the environment variable is read).
    """

    root: str | None = None

    @property
    def store(self) -> Storage:
        return Storage(self.root) if self.root else Storage.from_env()


class RendererResource(dg.ConfigurableResource):
    """Which backend renders, with what settings, at what output size, and where.

    ``options`` is the backend's own configuration as data (e.g. ``{"threads": 2}`` for warp);
    unknown keys are rejected by the backend with a clear error. A ``speech`` option
    (echomimic-v3) names a speech of the storage: its ``speech_root`` is filled in, as the CLI does,
    from the storage of ``$NEWSMOTION_STORAGE`` (the default ``storage`` resource's) unless given.

    ``lips`` (stories only): ``"backend"``, the backend's own lips from the speech, or
    ``"musetalk"``, MuseTalk 1.5 drawn over the backend's silent frames, with ``lips_options``
    its options as data (``{"model_path": "/models/MuseTalk", "dtype": "float16"}``; unset:
    the released architecture with random weights, which the story's metadata says).

    ``launcher`` (``$NEWSMOTION_LAUNCHER`` overrides it for a whole run): ``"in-process"`` loads
    the backend (and, for diffusion backends, compiles it) once in ``setup_for_execution``; a
    single-run backfill renders all its partitions with it, and at teardown it is closed, freeing
    memory/VRAM, unless ``keep_warm`` keeps it for the next run in the same process (the
    in-process demo does). ``"subprocess"`` and ``"k8s"`` run each :meth:`render` call (and each
    backend cache step) in an engine process of its own through Dagster Pipes, one backend load
    per call, the latter in the pod ``k8s`` describes; nothing is loaded here. Example::

        RendererResource(backend="wan-animate", options={"model_path": "/storage/models/wan", "fp8": True},
                         launcher="k8s", k8s=K8sPodConfig(image="registry/newsmotion:1.4", gpus=1))
    """

    backend: str = "warp"
    options: dict[str, Any] = {}
    width: int = 720
    height: int = 1280
    fps: int = 30
    background: str = "#00B140"
    # Sparse keyframes (render-level, any backend): generate every N-th frame, infill the rest.
    keyframes: int = 1
    keep_warm: bool = False
    launcher: str = "in-process"
    k8s: K8sPodConfig = K8sPodConfig()
    # Pose fidelity measured on each clip (needs mediapipe; without it the telemetry says so).
    fidelity: bool = True
    fidelity_stride: int = 4
    lips: str = "backend"
    lips_options: dict[str, Any] = {}

    _backend: Backend | None = PrivateAttr(default=None)

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        self.spec()  # a bad size/fps fails here, before anything loads
        self.fidelity_config()  # a bad stride fails here, before anything loads
        self.story_lips()  # so does a bad lips choice or MuseTalk option
        if self.active_launcher == "in-process":
            self._backend = self._load()

    @property
    def active_launcher(self) -> str:
        """The launcher this run uses: ``$NEWSMOTION_LAUNCHER``, else ``launcher``."""
        return resolve_launcher(self.launcher)

    def render(
        self, context: dg.AssetExecutionContext, store: Storage, pairs: Sequence[tuple[str, str]]
    ) -> Iterator[RenderTelemetry]:
        """Render each (persona, loop) of ``pairs`` with this resource's backend and spec, where the
        launcher says; yields each render's telemetry, in order (in process: as each completes; an
        engine process: when it is done). An unchanged render comes back with outcome
        ``"skipped"``. Errors are the engine's (:class:`~newsmotion_engine.errors.NewsmotionError`)."""
        from newsmotion_engine.render.job import render_persona_loop

        launcher = self.active_launcher
        if launcher == "in-process":
            backend, spec = self.loaded, self.spec()
            for persona_id, loop_id in pairs:
                yield render_persona_loop(store, persona_id, loop_id, backend, spec, fidelity=self.fidelity_config())
            return
        self.spec()  # fail on a bad size before a process starts
        args = self._engine_args(launcher, ["render", *(f"{p}/{l}" for p, l in pairs)])
        result = run_engine(context, launcher, args, store, self.k8s)
        for check in result.checks:
            # Reported by the engine (pose fidelity); a check result can only be yielded for a
            # check the asset declares, so the rest are logged with their values.
            outcome = "passed" if check.passed else "failed"
            context.log.info(f"engine check {check.check_name}: {outcome} {dict(check.metadata or {})}")
        yield from iter_records(result.metadata)

    def prepare(self, context: dg.AssetExecutionContext, store: Storage, kind: str, ids: Sequence[str]) -> PreparedCaches:
        """Build this backend's sub-caches for loops (``kind="guidance"``) or personas
        (``"persona"``) where the launcher says; what was built comes back as one record."""
        launcher = self.active_launcher
        if launcher == "in-process":
            return prepare_backend_caches(store, self.loaded, self.spec(), kind, ids, log=context.log.info)
        self.spec()
        result = run_engine(context, launcher, self._engine_args(launcher, ["prepare", "--kind", kind, *ids]), store, self.k8s)
        if not isinstance(result.metadata.get("prepared"), dict):
            raise EngineProcessError("the engine process reported no prepared caches")
        return PreparedCaches.from_dict(result.metadata["prepared"])

    def run_benchmarks(
        self, context: dg.AssetExecutionContext, store: Storage, suites: Sequence[str], gpu_preset: str | None = None
    ) -> dict[str, Any]:
        """Run bench suites (and, with ``gpu_preset``, the GPU forward bench) where the launcher
        says, results as JSON into ``store.bench_dir``; returns ``{suite: result}``."""
        from newsmotion_engine.pipes import bench_command

        launcher = self.active_launcher
        if launcher == "in-process":
            return bench_command(context_report(context), out_dir=str(store.bench_dir), suites=suites, gpu_preset=gpu_preset)
        result = run_engine(context, launcher, bench_args(suites, gpu_preset), store, self.k8s)
        return dict(result.metadata.get("results") or {})

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        if self._backend is not None and not self.keep_warm:
            _WARM.pop(_key(self.backend, self.options), None)
            self._backend.close()
        self._backend = None

    def _engine_args(self, launcher: str, command: list[str]):
        return backend_args(
            command, backend=self.backend, options=self.options, width=self.width, height=self.height, fps=self.fps,
            background=self.background, launcher=launcher, keyframes=self.keyframes, fidelity=self.fidelity,
            fidelity_stride=self.fidelity_stride,
        )  # fmt: skip

    def _load(self) -> Backend:
        from newsmotion_engine.render.job import storage_backend_options

        options = storage_backend_options(Storage.from_env(), self.options)
        key = _key(self.backend, options)
        if key not in _WARM:
            backend = get_backend(self.backend, **options)
            backend.load()
            _WARM[key] = backend
        return _WARM[key]

    @property
    def loaded(self) -> Backend:
        if self._backend is None:  # used outside a run (e.g. a unit test)
            self._backend = self._load()
        return self._backend

    def story_lips(self) -> MuseTalkOptions | None:
        """MuseTalk's options when ``lips`` is ``"musetalk"``, else ``None`` (:func:`~newsmotion_engine.story.lips.story_lips`)."""
        return story_lips(self.lips, self.lips_options)

    def fidelity_config(self) -> FidelityConfig:
        return FidelityConfig(enabled=self.fidelity, stride=self.fidelity_stride)

    def spec(self) -> RenderSpec:
        return RenderSpec(width=self.width, height=self.height, fps=self.fps, background=self.background,
                          keyframes=self.keyframes)  # fmt: skip
