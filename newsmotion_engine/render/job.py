"""One render, persona x loop, from ids: load both caches, skip when the clip is current, render.

Shared by the CLI and the Dagster ``render`` asset. A render only *loads* caches
(:func:`load_render_inputs`): a missing, stale or corrupt one raises
:class:`~newsmotion_engine.errors.CacheNotReadyError` naming what to build, never a silently
wrong video and never a build behind the orchestrator's back. Building is the callers' business:
the Dagster cache assets, or the CLI's convenience step :func:`ensure_render_inputs`, which goes
through the same :func:`ensure_guidance` / :func:`ensure_persona` the assets call.

Every render has an input digest (:func:`input_digest`): the guidance and persona cache digests,
the backend's name and identity, and the output size, fps, background and seed. It is recorded in
the telemetry; a render whose clip on disk records the same digest is skipped, and the Dagster
render asset reports it as its data version. A render driven by speech (``visemes=``) adds the
viseme track's digest; a silent render's digest is what it always was.

Example::

    store = Storage.from_env()
    backend = get_backend("warp"); backend.load()
    tele = render_persona_loop(store, "anna", "nod", backend, RenderSpec())
    tele.outcome  # "rendered", or "skipped" when nothing changed since the last render
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from newsmotion_engine import cachedir
from newsmotion_engine.errors import BadInputError, CacheNotReadyError
from newsmotion_engine.guidance.cache import SCHEMA as GUIDANCE_SCHEMA
from newsmotion_engine.guidance.cache import GuidanceCache, check_loop_exists, ensure_guidance, load_guidance, loop_source
from newsmotion_engine.persona.build import ensure_persona
from newsmotion_engine.persona.cache import SCHEMA as PERSONA_SCHEMA
from newsmotion_engine.persona.cache import (
    PersonaCache,
    image_source,
    load_persona,
    current_params,
    persona_source_image,
)
from newsmotion_engine.render.base import Backend, RenderSpec
from newsmotion_engine.render.clip import render_clip
from newsmotion_engine.render.fidelity import FidelityConfig
from newsmotion_engine.render.telemetry import RenderProvenance, RenderTelemetry, TelemetryError
from newsmotion_engine.storage import Storage
from newsmotion_engine.video.encode import check_output_folder

if TYPE_CHECKING:
    from newsmotion_engine.speech.visemes import VisemeTrack

__all__ = [
    "RenderInputs",
    "announce_step",
    "backend_identity",
    "check_render_request",
    "current_render",
    "ensure_persona_input",
    "ensure_render_inputs",
    "input_digest",
    "load_guidance_input",
    "load_persona_input",
    "load_render_inputs",
    "render_lock",
    "render_persona_loop",
    "storage_backend_options",
    "visemes_digest",
]

Progress = Callable[[int, int], None]
# on_step(label) is called when a visible step starts (e.g. "building guidance cache nod") and
# returns the progress callback for it.
OnStep = Callable[[str], Progress]

# Keys of ``describe()`` that report on the last load or render (timings, which caches were hit):
# not inputs of a render, so they stay out of its digest.
RUN_REPORT_KEYS = ("accel_report", "last_render")
# Artifacts every backend gets from the base caches; a backend needing more has sub-caches.
_BASE_ARTIFACTS = {
    "guidance": frozenset(name.removesuffix(".npy") for name in GUIDANCE_SCHEMA.arrays),
    "persona": frozenset(name.removesuffix(".npy") for name in PERSONA_SCHEMA.arrays),
}


@dataclass(frozen=True)
class RenderInputs:
    """The two loaded caches of one render and how this call got them (``"hit"``: loaded as it
    was; ``"built"``: built just before, by :func:`ensure_render_inputs`)."""

    guidance: GuidanceCache
    persona: PersonaCache
    guidance_state: str = "hit"
    persona_state: str = "hit"


def storage_backend_options(storage: Storage, options: dict[str, Any]) -> dict[str, Any]:
    """``options`` with the paths of ``storage`` that name things in them filled in (unless
    given): a ``speech`` id gets ``speech_root`` (echomimic-v3 performs a speech of this storage)."""
    options = dict(options)
    if "speech" in options:
        options.setdefault("speech_root", str(storage.speech_root))
    return options


def check_render_request(storage: Storage, persona_id: str, loop_id: str, out_path: Path | None = None) -> None:
    """Fail fast, before any work: both ids valid, the loop known (a canonical loop or a driving
    video; nothing is hashed here), the persona known (a kept source portrait or a cache), and an
    explicit ``out_path``'s folder writable."""
    check_loop_exists(storage, loop_id)
    if not storage.persona_dir(persona_id).is_dir():  # persona_dir refuses an invalid id
        persona_source_image(storage, persona_id)  # raises "unknown persona ..." when there is none
    if out_path is not None:
        check_output_folder(out_path)


def load_render_inputs(storage: Storage, persona_id: str, loop_id: str) -> RenderInputs:
    """Load both caches checked against their current sources and parameters (a driving video and
    the persona's kept portrait are hashed once each). Never builds.

    Raises:
        CacheNotReadyError: a cache is missing, stale or corrupt; the message says what to
            materialize or run.
        NewsmotionError: the loop is unknown.
    """
    return RenderInputs(load_guidance_input(storage, loop_id), load_persona_input(storage, persona_id))


def load_guidance_input(storage: Storage, loop_id: str) -> GuidanceCache:
    """Load (never build) the loop's guidance cache, checked against its current source."""
    return _loaded(
        f"guidance cache for loop {loop_id!r}",
        f"materialize guidance_cache[{loop_id}] or run `newsmotion guidance build {loop_id}`",
        lambda: load_guidance(storage, loop_id, expected=loop_source(storage, loop_id)),
    )


def load_persona_input(storage: Storage, persona_id: str) -> PersonaCache:
    """Load (never build) the persona cache, checked against the kept portrait when there is one (without one it
    cannot be rebuilt, so it is used as it is, params still checked)."""
    kept = storage.find_persona_source(persona_id)
    remedy = f"materialize persona_cache[{persona_id}] or run " + (
        f"`newsmotion persona build {persona_id}`" if kept else f"`newsmotion persona add IMAGE --id {persona_id}`"
    )
    expected = image_source(kept) if kept else None
    return _loaded(
        f"persona cache for {persona_id!r}",
        remedy,
        lambda: load_persona(storage, persona_id, expected_source=expected, expected_params=current_params(storage, persona_id)),
    )


def _loaded(what: str, remedy: str, load: Callable[[], Any]) -> Any:
    state, cache, detail = cachedir.load_status(load)
    if cache is None:
        raise CacheNotReadyError(what, state, detail, remedy)
    return cache


def ensure_render_inputs(
    storage: Storage,
    persona_id: str,
    loop_id: str,
    backend: Backend | None = None,
    spec: RenderSpec | None = None,
    *,
    on_step: OnStep | None = None,
) -> RenderInputs:
    """Build what a render needs and is missing or stale, then return its inputs: the CLI's
    convenience before :func:`render_persona_loop`. Uses the same :func:`ensure_guidance` /
    :func:`ensure_persona` as the Dagster cache assets and, when ``backend`` and ``spec`` are given
    and the backend has them, its ``prepare_guidance`` / ``prepare_persona`` (its sub-caches).

    ``on_step(label)`` is called as each build starts ("building guidance cache nod", "building
    persona cache anna", "building wan-animate artifacts") and returns a ``progress(done, total)``
    for it; current caches announce nothing.
    """
    guidance, guidance_built = ensure_guidance(storage, loop_id, progress=announce_step(on_step, f"building guidance cache {loop_id}"))
    persona, persona_built = ensure_persona_input(storage, persona_id, on_step=on_step)
    if backend is not None and spec is not None:
        _prepare_backend(backend, guidance, persona, spec, on_step)
    return RenderInputs(guidance, persona, "built" if guidance_built else "hit", "built" if persona_built else "hit")


def ensure_persona_input(storage: Storage, persona_id: str, *, on_step: OnStep | None = None) -> tuple[PersonaCache, bool]:
    """The persona cache, built first from its kept portrait when missing or stale (``True`` when
    built); without a kept portrait, the cache as it is (:func:`load_persona_input`)."""
    if storage.find_persona_source(persona_id) is None:
        return load_persona_input(storage, persona_id), False  # nothing to build from
    return ensure_persona(storage, persona_id, progress=announce_step(on_step, f"building persona cache {persona_id}"))


def announce_step(on_step: OnStep | None, label: str) -> Progress | None:
    """A progress callback that starts the step ``label`` on its first call (builders report
    progress only while building, so a current cache shows no step)."""
    if on_step is None:
        return None
    started: list[Progress] = []

    def progress(done: int, total: int) -> None:
        if not started:
            started.append(on_step(label))
        started[0](done, total)

    return progress


def _prepare_backend(backend: Backend, guidance: GuidanceCache, persona: PersonaCache, spec: RenderSpec, on_step: OnStep | None) -> None:
    calls = [
        (method, cache)
        for method, cache in ((getattr(backend, "prepare_guidance", None), guidance), (getattr(backend, "prepare_persona", None), persona))
        if callable(method)
    ]
    if not calls:
        return
    needs = getattr(backend, "needs", None)
    has_subcaches = needs is not None and (
        bool(needs.guidance - _BASE_ARTIFACTS["guidance"]) or bool(needs.persona - _BASE_ARTIFACTS["persona"])
    )
    # Announced only for backends with sub-caches: for the others the calls are no-ops.
    progress = on_step(f"building {backend.name} artifacts") if on_step is not None and has_subcaches else None
    for done, (method, cache) in enumerate(calls):
        if progress is not None:
            progress(done, len(calls))
        method(cache, spec)
    if progress is not None:
        progress(len(calls), len(calls))


def backend_identity(backend: Backend) -> dict[str, Any]:
    """What about a backend changes its frames: its ``identity()`` when it has one, else its
    ``describe()`` without the run reports (:data:`RUN_REPORT_KEYS`). Call after ``load()``
    (a loaded backend knows its weights' digest)."""
    identity = getattr(backend, "identity", None)
    if callable(identity):
        return dict(identity())
    return {k: v for k, v in backend.describe().items() if k not in RUN_REPORT_KEYS}


def visemes_digest(visemes: VisemeTrack) -> str:
    """sha256 of a viseme track's frame rate and its four float32 curves (what the lips perform)."""
    h = hashlib.sha256(f"visemes fps={float(visemes.fps)!r}".encode())
    for name in ("open", "wide", "round", "energy"):
        h.update(name.encode())
        h.update(np.ascontiguousarray(getattr(visemes, name), dtype=np.float32).tobytes())
    return h.hexdigest()


def input_digest(
    guidance: GuidanceCache, persona: PersonaCache, backend: Backend, spec: RenderSpec, visemes: VisemeTrack | None = None
) -> str:
    """The render's input digest: sha256 over the guidance cache digest, the persona cache digest,
    the backend's name and :func:`backend_identity`, the spec (width, height, fps, background,
    seed) and, for a speaking render, :func:`visemes_digest`. Equal digests mean equal frames, so
    an unchanged render is skipped; it is also the Dagster render asset's data version."""
    payload = {
        "guidance": guidance.digest,
        "persona": persona.digest,
        "backend": backend.name,
        "identity": backend_identity(backend),
        "spec": spec.as_dict(),
    }
    if visemes is not None:
        payload["visemes"] = visemes_digest(visemes)
    # Round-trip through JSON (non-JSON values as their str) so the hash sees plain data.
    return cachedir.sha256_json(json.loads(json.dumps(payload, default=str)))


def render_lock(out_path: Path):
    """The lock one clip's writer holds while it renders (``.{name}.mp4.lock`` beside it): two runs
    of the same render never write it at once (the second waits, then finds it current), and the
    temp-file sweep (:mod:`newsmotion_engine.sweep`) knows a clip's temporary files are stale when
    the lock is free. No timeout: a diffusion render may take longer than any fixed wait."""
    return cachedir.cache_lock(Path(out_path), timeout=-1)


def current_render(out_path: Path, digest: str) -> RenderTelemetry | None:
    """The record of the clip at ``out_path`` when it exists and was made from ``digest``."""
    json_path = out_path.with_suffix(".json")
    if not (out_path.is_file() and json_path.is_file()):
        return None
    try:
        recorded = RenderTelemetry.read(json_path)
    except TelemetryError:
        return None  # an unreadable or older record cannot prove the clip current: render again
    if recorded.schema_version < 2:
        return None  # recorded before pose fidelity: render again so the clip gets measured
    return recorded if recorded.input_digest == digest else None


def render_persona_loop(
    storage: Storage,
    persona_id: str,
    loop_id: str,
    backend: Backend,
    spec: RenderSpec,
    *,
    inputs: RenderInputs | None = None,
    out_path: Path | None = None,
    force: bool = False,
    progress: Progress | None = None,
    launcher: str = "in-process",
    fidelity: FidelityConfig = FidelityConfig(),
    visemes: VisemeTrack | None = None,
) -> RenderTelemetry:
    """Render ``loop_id`` performed by ``persona_id`` to ``out_path`` (default
    ``motion/renders/{persona}/{loop}/{backend}.mp4``) and return its :class:`RenderTelemetry`.

    Args:
        storage: where the caches and renders live.
        backend: a backend from ``get_backend`` (loaded here if it is not yet).
        spec: output size, fps, background, seed.
        inputs: caches already loaded (by :func:`ensure_render_inputs`); default: checked and
            loaded here with :func:`check_render_request` and :func:`load_render_inputs`.
        force: render even when the clip on disk is current.
        progress: ``progress(done, total)`` per frame.
        launcher: which process runs the render, recorded in its telemetry (``"in-process"``, or
            ``"pipes-subprocess"`` / ``"pipes-k8s"`` from :mod:`newsmotion_engine.pipes`).
        fidelity: pose fidelity measured on the new clip (on by default; ``FidelityConfig(enabled=
            False)`` turns it off, and the record says so). A skipped render keeps its record.
        visemes: the speech's mouth shapes, one frame per loop frame (see
            :func:`~newsmotion_engine.render.clip.render_clip`); part of the input digest.

    When the clip and its telemetry on disk record the same :func:`input_digest`, nothing is
    rendered: the stored record is returned with ``outcome="skipped"`` and this call's cache states.

    Raises:
        CacheNotReadyError: a cache is missing, stale or corrupt (build it first).
        NewsmotionError: an unknown id, an unwritable output folder, an encoder failure.
    """
    if inputs is None:
        check_render_request(storage, persona_id, loop_id, out_path)
        inputs = load_render_inputs(storage, persona_id, loop_id)
    elif (inputs.guidance.loop_id, inputs.persona.persona_id) != (loop_id, persona_id):
        raise ValueError(
            f"inputs are for {inputs.persona.persona_id} x {inputs.guidance.loop_id}, not {persona_id} x {loop_id}"
        )
    backend.load()
    digest = input_digest(inputs.guidance, inputs.persona, backend, spec, visemes)
    provenance = RenderProvenance(
        input_digest=digest,
        guidance_digest=inputs.guidance.digest,
        persona_digest=inputs.persona.digest,
        guidance_cache=inputs.guidance_state,
        persona_cache=inputs.persona_state,
    )
    out = Path(out_path) if out_path is not None else storage.render_path(persona_id, loop_id, backend.name)
    if not force and (recorded := current_render(out, digest)) is not None:
        return dataclasses.replace(recorded, outcome="skipped", provenance=provenance)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BadInputError(out.parent, f"cannot create the output folder ({exc.strerror or exc})") from None
    with render_lock(out):
        # Another process (an earlier attempt of a retried run) may have finished it while we waited.
        if not force and (recorded := current_render(out, digest)) is not None:
            return dataclasses.replace(recorded, outcome="skipped", provenance=provenance)
        return render_clip(inputs.guidance, inputs.persona, backend, spec, out, progress=progress, provenance=provenance,
                           launcher=launcher, fidelity=fidelity, visemes=visemes)
