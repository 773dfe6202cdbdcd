"""The renderer resource: owns the loaded backend (loaded in ``setup_for_execution``, once per
process), so a single-run backfill or an in-process demo renders many partitions warm."""

from __future__ import annotations

import atexit
import json
from typing import Any

import dagster as dg
from pydantic import PrivateAttr

from newsmotion_engine.render import Backend, RenderSpec, get_backend
from newsmotion_engine.render.fidelity import FidelityConfig
from newsmotion_engine.storage import Storage


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
    """Which backend renders, with what settings, at what output size.

    ``options`` is the backend's own configuration as data (e.g. ``{"threads": 2}`` for warp);
    unknown keys are rejected by the backend with a clear error. The backend is loaded (and, for
    diffusion backends, compiled) once in ``setup_for_execution``; a single-run backfill renders
    all its partitions with it. At teardown it is closed, freeing memory/VRAM, unless
    ``keep_warm`` keeps it for the next run in the same process (the in-process demo does).
    """

    backend: str = "warp"
    options: dict[str, Any] = {}
    width: int = 720
    height: int = 1280
    fps: int = 30
    background: str = "#00B140"
    keep_warm: bool = False
    # Pose fidelity measured on each clip (needs mediapipe; without it the telemetry says so).
    fidelity: bool = True
    fidelity_stride: int = 4

    _backend: Backend | None = PrivateAttr(default=None)

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        self.spec()  # a bad size/fps fails here, before anything loads
        self.fidelity_config()
        self._backend = self._load()

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        if self._backend is not None and not self.keep_warm:
            _WARM.pop(_key(self.backend, self.options), None)
            self._backend.close()
        self._backend = None

    def _load(self) -> Backend:
        key = _key(self.backend, self.options)
        if key not in _WARM:
            backend = get_backend(self.backend, **self.options)
            backend.load()
            _WARM[key] = backend
        return _WARM[key]

    @property
    def loaded(self) -> Backend:
        if self._backend is None:  # used outside a run (e.g. a unit test)
            self._backend = self._load()
        return self._backend

    def fidelity_config(self) -> FidelityConfig:
        return FidelityConfig(enabled=self.fidelity, stride=self.fidelity_stride)

    def spec(self) -> RenderSpec:
        return RenderSpec(width=self.width, height=self.height, fps=self.fps, background=self.background)
