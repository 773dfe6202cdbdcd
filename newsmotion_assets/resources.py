"""The renderer resource: owns the loaded backend (loaded in ``setup_for_execution``, once per
process), so a single-run backfill or an in-process demo renders many partitions warm."""

from __future__ import annotations

import atexit
import json
from typing import Any

import dagster as dg
from pydantic import PrivateAttr

from newsmotion_engine.render import Backend, RenderSpec, get_backend
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
    # Sparse keyframes (render-level, any backend): generate every N-th frame, infill the rest.
    keyframes: int = 1
    keep_warm: bool = False

    _backend: Backend | None = PrivateAttr(default=None)

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        self.spec()  # a bad size/fps fails here, before anything loads
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

    def render_queue(self, jobs: list[Any], **kwargs: Any) -> Any:
        """Render several clips through the engine's 3-stage queue (prepare on a CPU thread,
        denoise on the GPU, decode + infill + encode overlapped); see
        :func:`newsmotion_engine.render.queue.render_queue`. The resource owns the backend the
        queue feeds."""
        from newsmotion_engine.render.queue import render_queue

        return render_queue(self.loaded, jobs, **kwargs)

    def spec(self) -> RenderSpec:
        return RenderSpec(width=self.width, height=self.height, fps=self.fps, background=self.background,
                          keyframes=self.keyframes)  # fmt: skip
