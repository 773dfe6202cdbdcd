"""``persona_cache[persona]``: Tier-2 appearance per anchor, built once, memory-mapped later."""


import cv2
import dagster as dg

from newsmotion_assets.metadata import png_markdown, warm_load_ms
from newsmotion_assets.partitions import persona_partitions
from newsmotion_engine import cachedir, storage
from newsmotion_engine.errors import CacheError, NewsmotionError
from newsmotion_engine.guidance.draw import png_bytes
from newsmotion_engine.persona.cache import build_persona, load_persona, persona_problems
from newsmotion_engine.persona.preview import preview_image


@dg.asset(
    partitions_def=persona_partitions,
    group_name="appearance",
    kinds={"python", "numpy"},
    description="One anchor's normalized portrait, person matte, face mask and 133 landmarks; "
    "storage/motion/persona_caches/{persona}/. Source portrait: storage/personas/sources/{persona}.*",
)
def persona_cache(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
    persona_id = context.partition_key
    source = storage.find_persona_source(persona_id)
    if source is None:
        raise NewsmotionError(
            f"persona {persona_id!r} has no source portrait in {storage.persona_sources()}; drop the image "
            f"into {storage.persona_inbox()} or run `newsmotion persona add IMAGE --id {persona_id}`"
        )
    cache, rebuilt = build_persona(source, persona_id)
    context.log.info(f"{persona_id}: {'built' if rebuilt else 'cache current, reused'} ({cache.path})")
    preview = preview_image(cache)
    preview = cv2.resize(preview, (preview.shape[1] // 2, preview.shape[0] // 2), interpolation=cv2.INTER_AREA)
    coverage = cache.metadata.get("coverage", {})
    return dg.MaterializeResult(
        metadata={
            "source": dg.MetadataValue.path(str(source)),
            "rebuilt": rebuilt,
            "matte_method": cache.matte_method,
            "visible_parts": ", ".join(cache.visible_parts),
            **{f"coverage_{k}": round(float(v), 4) for k, v in coverage.items()},
            "bytes": dg.MetadataValue.int(cachedir.cache_bytes(cache.path)),
            "path": dg.MetadataValue.path(str(cache.path)),
            "warm_load_ms_p50": warm_load_ms(lambda: load_persona(persona_id)),
            "preview": png_markdown(png_bytes(preview), f"{persona_id} preview"),
        }
    )


@dg.asset_check(
    asset=persona_cache,
    partitions_def=persona_partitions,
    blocking=True,
    description="Hashes match metadata.json; masks hold a person, face inside it, landmarks sane.",
)
def persona_cache_valid(context: dg.AssetCheckExecutionContext) -> dg.AssetCheckResult:
    try:
        cache = load_persona(context.partition_key, verify=True)
    except CacheError as exc:
        return dg.AssetCheckResult(passed=False, metadata={"problem": str(exc)})
    problems = persona_problems(cache)
    return dg.AssetCheckResult(passed=not problems, metadata={"problems": "; ".join(problems) or "none"})
