"""Sample speeches: short news scripts spoken by the built-in TTS, so a fresh machine can demo,
test and benchmark the audio tier offline (nothing is downloaded or recorded).

:data:`SAMPLE_SPEECHES` spans several eSpeak voices and speaking rates; ``headlines`` and
``sport`` end with the same sign-off (:data:`SIGN_OFF`) in the same voice and rate, the repeat a
newsroom's audio is full of (what the SimHash encoder cache is meant to reuse). ``intro`` is the
README's first line: "Good evening, here is the news."
"""

from __future__ import annotations

from newsmotion_engine.speech.cache import DEFAULT_FPS, ensure_speech_cache, source_record
from newsmotion_engine.speech.sources import CacheRoot, find_source, install_source, read_source
from newsmotion_engine.speech.tts import TextSpeech

__all__ = ["SIGN_OFF", "SAMPLE_SPEECHES", "ensure_sample_speeches"]

SIGN_OFF = "That is all for tonight. Thank you for watching, and good night."

SAMPLE_SPEECHES: dict[str, TextSpeech] = {
    "intro": TextSpeech("Good evening, here is the news.", "en-us", 165),
    "headlines": TextSpeech(
        "Good evening. Tonight's headlines: heavy rain is expected across the north, the city council "
        f"approves a new budget, and the harbour reopens after a week of repairs. {SIGN_OFF}",
        "en-gb-x-rp", 150),
    "sport": TextSpeech(
        "In sport, the home team won their third match in a row, and the captain called it the best "
        f"result of the season. {SIGN_OFF}",
        "en-gb-x-rp", 150),
    "weather": TextSpeech(
        "Now the weather. A cold front moves in from the west tomorrow, bringing showers in the "
        "morning and clear skies by the evening. Temperatures stay below ten degrees.",
        "en-us+f3", 185),
    "breaking": TextSpeech(
        "Breaking news: a power cut has closed the central station. Trains are delayed until further "
        "notice, and travellers are asked to use the buses instead.",
        "en-us", 210),
    "markets": TextSpeech(
        "In the markets, shares rose for a third day, led by technology and energy companies, while "
        "the pound fell slightly against the dollar.",
        "en-gb-scotland", 135),
}


def ensure_sample_speeches(cache_root: CacheRoot, *, fps: float = DEFAULT_FPS) -> list[str]:
    """Build (or reuse when current) every sample speech's cache and keep its ``.tts`` source, so
    the speeches are listed, rebuildable and Dagster partitions like any other. Idempotent. A
    speech id the user already gave another source is left alone and not returned. Returns the
    sample ids now current, in :data:`SAMPLE_SPEECHES` order."""
    ready = []
    for speech_id, request in SAMPLE_SPEECHES.items():
        kept = find_source(cache_root, speech_id)
        if kept is not None and source_record(read_source(kept)) != source_record(request):
            continue
        ensure_speech_cache(request, cache_root, speech_id, fps=fps)
        if kept is None:
            install_source(cache_root, request, speech_id)
        ready.append(speech_id)
    return ready
