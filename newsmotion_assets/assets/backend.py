"""Backend sub-caches: what a render backend derives once from a cache before it can render.

``backend_guidance_cache[loop]`` (e.g. wan-animate's pose latents, first-segment conditioning and
prompt embeddings) and ``backend_persona_cache[persona]`` (wan-animate's reference latents and CLIP
image tokens) are built here, through the renderer resource in the ``gpu`` pool — in process, or
in an engine process when its launcher says so; :func:`~newsmotion_engine.render.prepare.prepare_backend_caches`
either way — for the resource's backend and output size, so the UI shows what exists and
``render`` only loads them. The warp backend needs none: its assets succeed and say so.

A one-partition run reports a data version: the digest of the upstream cache's digest, the
backend's identity and the render spec, so re-materializing an unchanged backend cache does not
mark renders stale.
"""

import json

import dagster as dg

from newsmotion_assets.assets.driving import driving_clip
from newsmotion_assets.assets.guidance import guidance_cache
from newsmotion_assets.assets.persona import persona_cache
from newsmotion_assets.automation import eager_after_valid_upstream
from newsmotion_assets.partitions import loop_partitions, persona_partitions
from newsmotion_assets.resources import RendererResource, StorageResource
from newsmotion_engine import cachedir
from newsmotion_engine.render.base import RenderSpec
from newsmotion_engine.render.prepare import PreparedCaches


@dg.asset(
    partitions_def=loop_partitions,
    # wan-animate-2's loop tensors are encoded from the driving clip (the other backends ignore it).
    deps=[guidance_cache, driving_clip],
    group_name="motion",
    kinds={"python", "pytorch"},
    pool="gpu",
    # A backfill is one run: the backend loads once for all its partitions.
    backfill_policy=dg.BackfillPolicy.single_run(),
    automation_condition=eager_after_valid_upstream(),
    description="The render backend's loop-side tensors (wan-animate: pose latents, first-segment "
    "conditioning, prompt embeddings) for the renderer's size, under the loop's guidance cache.",
)
def backend_guidance_cache(
    context: dg.AssetExecutionContext, renderer: RendererResource, storage: StorageResource
) -> dg.MaterializeResult:
    # The resource prepares them where its launcher says (in process, or an engine process).
    return _result(renderer.prepare(context, storage.store, "guidance", context.partition_keys), renderer.spec())


@dg.asset(
    partitions_def=persona_partitions,
    deps=[persona_cache],
    group_name="appearance",
    kinds={"python", "pytorch"},
    pool="gpu",
    # A backfill is one run: the backend loads once for all its partitions.
    backfill_policy=dg.BackfillPolicy.single_run(),
    automation_condition=eager_after_valid_upstream(),
    description="The render backend's persona-side tensors (wan-animate: reference-image latents, "
    "CLIP image tokens) for the renderer's size and background, under the persona's cache.",
)
def backend_persona_cache(
    context: dg.AssetExecutionContext, renderer: RendererResource, storage: StorageResource
) -> dg.MaterializeResult:
    return _result(renderer.prepare(context, storage.store, "persona", context.partition_keys), renderer.spec())


def _result(prepared: PreparedCaches, spec: RenderSpec) -> dg.MaterializeResult:
    built = prepared.built
    metadata = {
        "backend": prepared.backend,
        "size": f"{spec.width}x{spec.height}",
        "artifacts": ", ".join(prepared.artifacts) or f"{prepared.backend} needs no backend artifacts",
        "built": sum(built.values()),
        "reused": sum(1 for b in built.values() if not b) if prepared.artifacts else 0,
    }
    if len(built) > 1:
        metadata["built_partitions"] = ", ".join(k for k, b in built.items() if b) or "none"
    data_version = None
    if len(prepared.upstream_digests) == 1:
        # One MaterializeResult carries one data version for all its partitions: given only when
        # the run has one (as the render asset does).
        (upstream,) = prepared.upstream_digests.values()
        payload = {"upstream": upstream, "backend": prepared.backend, "identity": prepared.identity, "spec": spec.as_dict()}
        data_version = dg.DataVersion(cachedir.sha256_json(json.loads(json.dumps(payload, default=str))))
        metadata["digest"] = data_version.value
    return dg.MaterializeResult(metadata=metadata, data_version=data_version)
