"""Backend sub-caches from ids: what a backend derives once from the base caches before it can
render (wan-animate: pose latents, prompt embeddings; reference latents, CLIP tokens).

Shared by the Dagster ``backend_guidance_cache`` / ``backend_persona_cache`` assets in process and
by the engine entry point (:mod:`newsmotion_engine.pipes`) when those steps run in an engine
process; :class:`PreparedCaches` is the one record of what was done, and crosses that process
boundary as JSON (``to_dict`` / ``from_dict``).

Example::

    prepared = prepare_backend_caches(store, backend, RenderSpec(), "guidance", ["nod"])
    prepared.built  # {"nod": True}, False when the sub-cache was already current
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from newsmotion_engine import cachedir
from newsmotion_engine.errors import CacheNotReadyError
from newsmotion_engine.guidance.cache import SCHEMA as GUIDANCE_SCHEMA
from newsmotion_engine.guidance.cache import load_guidance, loop_source
from newsmotion_engine.persona.cache import SCHEMA as PERSONA_SCHEMA
from newsmotion_engine.persona.cache import current_params, image_source, load_persona, persona_source_image
from newsmotion_engine.render.base import Backend, RenderSpec
from newsmotion_engine.render.job import backend_identity

__all__ = ["KINDS", "PreparedCaches", "prepare_backend_caches"]

KINDS = ("guidance", "persona")
# What the base caches already hold; anything else a backend needs is a backend artifact.
BASE_ARTIFACTS = {
    "guidance": frozenset(name.removesuffix(".npy") for name in GUIDANCE_SCHEMA.arrays),
    "persona": frozenset(name.removesuffix(".npy") for name in PERSONA_SCHEMA.arrays),
}


@dataclass(frozen=True)
class PreparedCaches:
    """One step's backend sub-caches: the backend's name and identity (what changes its
    artifacts), the artifacts it derives beyond the base caches (empty: it needs none, as warp),
    and per id whether it was built now (``False``: already current) and the upstream cache's
    digest."""

    kind: str
    backend: str
    identity: dict[str, Any]
    artifacts: tuple[str, ...]
    built: dict[str, bool]
    upstream_digests: dict[str, str]

    def to_dict(self) -> dict[str, Any]:
        # Through JSON (non-JSON values as their str), as the data version hashes it.
        return json.loads(json.dumps(asdict(self), default=str))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PreparedCaches:
        return cls(
            kind=str(data["kind"]), backend=str(data["backend"]), identity=dict(data["identity"]),
            artifacts=tuple(data["artifacts"]), built={str(k): bool(v) for k, v in data["built"].items()},
            upstream_digests={str(k): str(v) for k, v in data["upstream_digests"].items()},
        )  # fmt: skip


def prepare_backend_caches(
    storage, backend: Backend, spec: RenderSpec, kind: str, ids: Sequence[str], *, log: Callable[[str], None] | None = None
) -> PreparedCaches:
    """Build ``backend``'s sub-caches for each loop (``kind="guidance"``) or persona
    (``"persona"``) in ``ids`` at ``spec``'s size; current ones are kept.

    Raises:
        CacheNotReadyError: an upstream cache is missing, stale or corrupt ("materialize
            guidance_cache[nod] first"): this never builds another asset's output.
    """
    if kind not in KINDS:
        raise ValueError(f"kind {kind!r} is not one of {KINDS}")
    backend.load()
    built: dict[str, bool] = {}
    digests: dict[str, str] = {}
    for cache_id in ids:  # one, or many in a single-run backfill (the backend stays loaded)
        if kind == "guidance":
            cache = _upstream(
                f"guidance cache for loop {cache_id!r}", f"guidance_cache[{cache_id}]",
                lambda: load_guidance(storage, cache_id, expected=loop_source(storage, cache_id)),
            )  # fmt: skip
            built[cache_id] = bool(backend.prepare_guidance(cache, spec))
        else:
            source = image_source(persona_source_image(storage, cache_id))
            cache = _upstream(
                f"persona cache for {cache_id!r}", f"persona_cache[{cache_id}]",
                lambda: load_persona(storage, cache_id, expected_source=source, expected_params=current_params(storage, cache_id)),
            )  # fmt: skip
            built[cache_id] = bool(backend.prepare_persona(cache, spec))
        digests[cache_id] = cache.digest
        if log is not None:
            log(f"{backend.name} {cache_id}: {'built' if built[cache_id] else 'nothing to build'}")
    needs = getattr(backend.needs, kind)
    return PreparedCaches(
        kind=kind, backend=backend.name, identity=backend_identity(backend),
        artifacts=tuple(sorted(needs - BASE_ARTIFACTS[kind])), built=built, upstream_digests=digests,
    )  # fmt: skip


def _upstream(what: str, asset: str, load):
    state, cache, detail = cachedir.load_status(load)
    if cache is None:
        raise CacheNotReadyError(what, state, detail, f"materialize {asset} first")
    return cache
