"""``persona_cache[persona]``: Tier-2 appearance per anchor, built once, memory-mapped later.

The asset builds through :func:`ensure_persona` (the same function ``newsmotion persona add`` and
``newsmotion render`` use) from the persona's kept portrait, and reports the cache's digest as its
data version, so renders downstream show stale exactly when the appearance changed. A portrait
that cannot be used is rejected: moved to ``personas/rejected/`` with the reason, its partition
removed.
"""

import cv2
import dagster as dg

from newsmotion_assets.metadata import png_markdown, warm_load_ms
from newsmotion_assets.partitions import persona_partitions
from newsmotion_assets.resources import StorageResource
from newsmotion_assets.retries import FAILURE_TAG, TRANSIENT_RETRY, bad_input, sweep_temp_files
from newsmotion_engine import cachedir
from newsmotion_engine.errors import BadInputError, NewsmotionError
from newsmotion_engine.guidance.draw import png_bytes
from newsmotion_engine.persona.build import ensure_persona
from newsmotion_engine.persona.cache import load_persona, persona_source_image
from newsmotion_engine.persona.image import FRAMINGS
from newsmotion_engine.persona.preview import preview_image
from newsmotion_engine.persona.sources import reject_source


class PersonaConfig(dg.Config):
    """``framing``: ``medium`` (broadcast medium shot: head top at 10% of the frame, shoulders
    centred), ``wide`` (the photo's whole width) or ``as-is`` (fit, bottom-centre); unset keeps the
    persona's current framing (``medium`` for a new one). Another framing rebuilds the cache."""

    framing: str | None = None


@dg.asset(
    partitions_def=persona_partitions,
    group_name="appearance",
    kinds={"python", "numpy"},
    # One partition per run: a run reports one data version, this persona's cache digest.
    backfill_policy=dg.BackfillPolicy.multi_run(max_partitions_per_run=1),
    retry_policy=TRANSIENT_RETRY,
    description="One anchor's normalized portrait, person matte, face mask and 133 landmarks; "
    "storage/motion/persona_caches/{persona}/. Source portrait: storage/personas/sources/{persona}.*; "
    "a portrait that cannot be used moves to storage/personas/rejected/ and the persona is removed.",
)
def persona_cache(context: dg.AssetExecutionContext, config: PersonaConfig, storage: StorageResource) -> dg.MaterializeResult:
    store = storage.store
    persona_id = context.partition_key
    sweep_temp_files(context, store)
    try:
        source = persona_source_image(store, persona_id)
    except NewsmotionError as exc:  # no kept portrait: `newsmotion persona add` it first
        raise bad_input(context, exc, persona=persona_id) from None
    if config.framing is not None and config.framing not in FRAMINGS:
        raise dg.Failure(description=f"framing {config.framing!r} is not one of {', '.join(FRAMINGS)}", allow_retries=False)
    try:
        cache, built = ensure_persona(store, persona_id, image=source, framing=config.framing)
    except BadInputError as exc:
        # The portrait itself is unusable (no person, damaged file): retrying cannot help, so the
        # persona stops existing instead of lingering as a partition with missing renders.
        rejected = reject_source(store, persona_id, exc.problem)
        context.instance.delete_dynamic_partition(persona_partitions.name, persona_id)
        context.instance.add_run_tags(context.run_id, {FAILURE_TAG: "bad_input"})
        raise dg.Failure(
            description=f"{source.name}: {exc.problem} (moved to {rejected}; persona {persona_id!r} removed)",
            metadata={"rejected": dg.MetadataValue.path(str(rejected)), "reason": exc.problem},
            allow_retries=False,
        ) from None
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
            "framing": str((cache.metadata.get("framing") or {}).get("mode", "-")),
            "head_top_fraction": float((cache.metadata.get("framing") or {}).get("headroom") or 0.0),
            "turned_upright_deg_ccw": int((cache.metadata.get("source_image") or {}).get("upright_rotation_ccw", 0)),
            **{f"coverage_{k}": round(float(v), 4) for k, v in coverage.items()},
            "bytes": dg.MetadataValue.int(cachedir.cache_bytes(cache.path)),
            "path": dg.MetadataValue.path(str(cache.path)),
            "warm_load_ms_p50": warm_load_ms(lambda: load_persona(store, persona_id)),
            "preview": png_markdown(png_bytes(preview), f"{persona_id} preview"),
        },
    )
