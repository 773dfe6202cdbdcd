"""``speech_cache[speech]``: one speech's audio, voice segments and viseme track, built once.

The asset builds through :func:`ensure_speech_cache` (the same function ``newsmotion speech add``
and ``say`` use) from the speech's kept source in ``storage/speech/sources/`` (a recording, or a
``.tts`` text request), and reports the cache's digest as its data version. The sources come from
the inbox sensor or the CLI; a source that cannot be used fails its run as bad input (never
retried).
"""

import dagster as dg

from newsmotion_assets.metadata import png_markdown, warm_load_ms
from newsmotion_assets.partitions import speech_partitions
from newsmotion_assets.resources import StorageResource
from newsmotion_assets.retries import TRANSIENT_RETRY, bad_input, sweep_temp_files
from newsmotion_engine import cachedir
from newsmotion_engine.errors import NewsmotionError
from newsmotion_engine.speech.cache import DEFAULT_FPS, ensure_speech_cache, load_speech_cache
from newsmotion_engine.speech.preview import viseme_plot_png


class SpeechConfig(dg.Config):
    """``fps``: the video frame rate of the viseme track (another rate rebuilds the cache)."""

    fps: float = DEFAULT_FPS


@dg.asset(
    partitions_def=speech_partitions,
    group_name="speech",
    kinds={"python", "numpy"},
    # One partition per run: a run reports one data version, this speech's cache digest.
    backfill_policy=dg.BackfillPolicy.multi_run(max_partitions_per_run=1),
    retry_policy=TRANSIENT_RETRY,
    description="One speech: 16 kHz loudness-normalised audio, voice segments (silero VAD) and a viseme "
    "track per video frame (from the TTS's phonemes, or estimated from the audio); storage/speech/{speech}/. "
    "Source: storage/speech/sources/{speech}.* (a recording, or .tts text to speak).",
)
def speech_cache(context: dg.AssetExecutionContext, config: SpeechConfig, storage: StorageResource) -> dg.MaterializeResult:
    store = storage.store
    speech_id = context.partition_key
    sweep_temp_files(context, store)
    try:
        cache, built = ensure_speech_cache(None, store, speech_id, fps=config.fps)
    except NewsmotionError as exc:  # no source, or one that cannot be used: a person must fix it
        raise bad_input(context, exc, speech=speech_id) from None
    meta = cache.meta
    context.log.info(f"{speech_id}: {'built' if built else 'cache current, reused'} ({cache.path})")
    described = {"voice": meta["voice"], "words_per_minute": meta["words_per_minute"], "text": meta["text"]} \
        if meta.get("source_type") == "tts" else {"file": meta.get("source_name", "-")}
    plot = viseme_plot_png(cache.visemes, audio=cache.audio, vad=cache.vad, phonemes=cache.phonemes,
                           title=f"speech {speech_id}", width_in=10.0)
    return dg.MaterializeResult(
        data_version=dg.DataVersion(cache.digest),
        metadata={
            "built": built,
            "digest": cache.digest,
            "source_type": meta.get("source_type", "-"),
            **described,
            "duration_s": round(cache.duration_s, 3),
            "voiced_s": float(meta.get("speech_s", 0.0)),
            "voice_segments": len(cache.vad),
            "viseme_frames": len(cache.visemes),
            "fps": cache.fps,
            "viseme_source": meta.get("viseme_source", "-"),
            "bytes": dg.MetadataValue.int(cachedir.cache_bytes(cache.path)),
            "path": dg.MetadataValue.path(str(cache.path)),
            "warm_load_ms_p50": warm_load_ms(lambda: load_speech_cache(store, speech_id)),
            "visemes": png_markdown(plot, f"{speech_id} visemes"),
        },
    )
