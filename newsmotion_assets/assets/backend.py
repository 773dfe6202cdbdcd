"""Backend sub-caches: what a render backend derives once from a cache before it can render.

``backend_guidance_cache[loop]`` (e.g. wan-animate's pose latents, first-segment conditioning and
prompt embeddings) and ``backend_persona_cache[persona]`` (wan-animate's reference latents and CLIP
image tokens) are built here, through the renderer resource in the ``gpu`` pool, for the
resource's backend and output size, so the UI shows what exists and ``render`` only loads them.
The warp backend needs none: its assets succeed and say so.

A one-partition run reports a data version: the digest of the upstream cache's digest, the
backend's identity and the render spec, so re-materializing an unchanged backend cache does not
mark renders stale.
"""

import json

import dagster as dg

from newsmotion_assets.assets.guidance import guidance_cache
from newsmotion_assets.assets.persona import persona_cache
from newsmotion_assets.automation import eager_after_valid_upstream
from newsmotion_assets.partitions import loop_partitions, persona_partitions
from newsmotion_assets.resources import RendererResource, StorageResource
from newsmotion_engine import cachedir
from newsmotion_engine.errors import CacheNotReadyError
from newsmotion_engine.guidance.cache import load_guidance, loop_source
from newsmotion_engine.persona.cache import current_params, image_source, load_persona, persona_source_image
from newsmotion_engine.render.job import backend_identity

# What the base caches already hold (see ``BackendNeeds``); anything else a backend needs is a
# backend artifact built by the assets below.
BASE_GUIDANCE = frozenset({"keypoints"})
BASE_PERSONA = frozenset({"portrait", "person_mask", "face_mask", "landmarks"})


@dg.asset(
    partitions_def=loop_partitions,
    deps=[guidance_cache],
    group_name="motion",
    kinds={"python", "pytorch"},
    pool="gpu",
    backfill_policy=dg.BackfillPolicy.single_run(),
    automation_condition=eager_after_valid_upstream(),
    description="The render backend's loop-side tensors (wan-animate: pose latents, first-segment "
    "conditioning, prompt embeddings) for the renderer's size, under the loop's guidance cache.",
)
def backend_guidance_cache(
    context: dg.AssetExecutionContext, renderer: RendererResource, storage: StorageResource
) -> dg.MaterializeResult:
    store, backend, spec = storage.store, renderer.loaded, renderer.spec()
    built, digests = {}, {}
    for loop_id in context.partition_keys:  # one, or many in a single-run backfill (backend stays warm)
        guidance = _upstream(
            f"guidance cache for loop {loop_id!r}",
            f"guidance_cache[{loop_id}]",
            lambda: load_guidance(store, loop_id, expected=loop_source(store, loop_id)),
        )
        built[loop_id] = backend.prepare_guidance(guidance, spec)
        digests[loop_id] = guidance.digest
        context.log.info(f"{backend.name} {loop_id}: {'built' if built[loop_id] else 'nothing to build'}")
    return _result(backend, spec, built, digests, backend.needs.guidance - BASE_GUIDANCE)


@dg.asset(
    partitions_def=persona_partitions,
    deps=[persona_cache],
    group_name="appearance",
    kinds={"python", "pytorch"},
    pool="gpu",
    backfill_policy=dg.BackfillPolicy.single_run(),
    automation_condition=eager_after_valid_upstream(),
    description="The render backend's persona-side tensors (wan-animate: reference-image latents, "
    "CLIP image tokens) for the renderer's size and background, under the persona's cache.",
)
def backend_persona_cache(
    context: dg.AssetExecutionContext, renderer: RendererResource, storage: StorageResource
) -> dg.MaterializeResult:
    store, backend, spec = storage.store, renderer.loaded, renderer.spec()
    built, digests = {}, {}
    for persona_id in context.partition_keys:
        source = image_source(persona_source_image(store, persona_id))
        persona = _upstream(
            f"persona cache for {persona_id!r}",
            f"persona_cache[{persona_id}]",
            lambda: load_persona(store, persona_id, expected_source=source, expected_params=current_params(store, persona_id)),
        )
        built[persona_id] = backend.prepare_persona(persona, spec)
        digests[persona_id] = persona.digest
        context.log.info(f"{backend.name} {persona_id}: {'built' if built[persona_id] else 'nothing to build'}")
    return _result(backend, spec, built, digests, backend.needs.persona - BASE_PERSONA)


def _upstream(what: str, asset: str, load):
    """The upstream cache, current for its source; else a one-line failure naming the asset to
    materialize first (this asset never builds another asset's output)."""
    state, cache, detail = cachedir.load_status(load)
    if cache is None:
        raise CacheNotReadyError(what, state, detail, f"materialize {asset} first")
    return cache


def _result(backend, spec, built: dict[str, bool], digests: dict[str, str], artifacts: frozenset[str]) -> dg.MaterializeResult:
    metadata = {
        "backend": backend.name,
        "size": f"{spec.width}x{spec.height}",
        "artifacts": ", ".join(sorted(artifacts)) or f"{backend.name} needs no backend artifacts",
        "built": sum(built.values()),
        "reused": sum(1 for b in built.values() if not b) if artifacts else 0,
    }
    if len(built) > 1:
        metadata["built_partitions"] = ", ".join(k for k, b in built.items() if b) or "none"
    data_version = None
    if len(digests) == 1:
        # One MaterializeResult carries one data version for all its partitions: given only when
        # the run has one (as the render asset does).
        (upstream,) = digests.values()
        payload = {"upstream": upstream, "backend": backend.name, "identity": backend_identity(backend), "spec": spec.as_dict()}
        data_version = dg.DataVersion(cachedir.sha256_json(json.loads(json.dumps(payload, default=str))))
        metadata["digest"] = data_version.value
    return dg.MaterializeResult(metadata=metadata, data_version=data_version)
