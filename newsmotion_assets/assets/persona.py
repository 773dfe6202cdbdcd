"""``persona_cache[persona]``: Tier-2 appearance per anchor, built once, memory-mapped later.

The asset builds through :func:`ensure_persona` (the same function ``newsmotion persona add`` and
``newsmotion render`` use) from the persona's kept portrait, and reports the cache's digest as its
data version, so renders downstream show stale exactly when the appearance changed.
"""


import cv2
import dagster as dg

from newsmotion_assets.metadata import png_markdown, warm_load_ms
from newsmotion_assets.partitions import persona_partitions
from newsmotion_assets.resources import StorageResource
from newsmotion_engine import cachedir
from newsmotion_engine.errors import CacheError
from newsmotion_engine.guidance.draw import png_bytes
from newsmotion_engine.persona.cache import ensure_persona, load_persona, persona_problems, persona_source_image
from newsmotion_engine.persona.preview import preview_image


@dg.asset(
    partitions_def=persona_partitions,
    group_name="appearance",
    kinds={"python", "numpy"},
    description="One anchor's normalized portrait, person matte, face mask and 133 landmarks; "
    "storage/motion/persona_caches/{persona}/. Source portrait: storage/personas/sources/{persona}.*",
)
def persona_cache(context: dg.AssetExecutionContext, storage: StorageResource) -> dg.MaterializeResult:
    store = storage.store
    persona_id = context.partition_key
    source = persona_source_image(store, persona_id)
    cache, built = ensure_persona(store, persona_id, image=source)
    context.log.info(f"{persona_id}: {'built' if built else 'cache current, reused'} ({cache.path})")
    preview = preview_image(cache)
    preview = cv2.resize(preview, (preview.shape[1] // 2, preview.shape[0] // 2), interpolation=cv2.INTER_AREA)
    coverage = cache.metadata.get("coverage", {})
    return dg.MaterializeResult(
        data_version=dg.DataVersion(cache.digest),
        metadata={
            "source": dg.MetadataValue.path(str(source)),
            "built": built,
            "digest": cache.digest,
            "matte_method": cache.matte_method,
            "visible_parts": ", ".join(cache.visible_parts),
            "outside_the_photo": ", ".join(cache.metadata.get("out_of_view") or []) or "-",
            "turned_upright_deg_ccw": int((cache.metadata.get("source_image") or {}).get("upright_rotation_ccw", 0)),
            **{f"coverage_{k}": round(float(v), 4) for k, v in coverage.items()},
            "bytes": dg.MetadataValue.int(cachedir.cache_bytes(cache.path)),
            "path": dg.MetadataValue.path(str(cache.path)),
            "warm_load_ms_p50": warm_load_ms(lambda: load_persona(store, persona_id)),
            "preview": png_markdown(png_bytes(preview), f"{persona_id} preview"),
        },
    )


@dg.asset_check(
    asset=persona_cache,
    partitions_def=persona_partitions,
    blocking=True,
    description="Hashes match metadata.json; masks hold a person, face inside it, landmarks sane.",
)
def persona_cache_valid(context: dg.AssetCheckExecutionContext, storage: StorageResource) -> dg.AssetCheckResult:
    try:
        cache = load_persona(storage.store, context.partition_key, verify=True)
    except CacheError as exc:
        return dg.AssetCheckResult(passed=False, metadata={"problem": str(exc)})
    problems = persona_problems(cache)
    return dg.AssetCheckResult(passed=not problems, metadata={"problems": "; ".join(problems) or "none"})
