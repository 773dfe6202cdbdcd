"""The speech cache: built once from text or a recording, memory-mapped, validated; stale when its
source or params change; written atomically (a failed build leaves the old cache or nothing)."""

import json

import numpy as np
import pytest
import scipy.io.wavfile

from newsmotion_engine.speech import cache as cache_mod
from newsmotion_engine.speech import samples as samples_mod
from newsmotion_engine.speech.audio import SpeechInputError
from newsmotion_engine.speech.cache import (
    SpeechCacheError,
    ensure_speech_cache,
    load_speech_cache,
    speech_dir,
    speech_problems,
    speech_status,
)
from newsmotion_engine.speech.sources import add_speech, find_source, install_source, list_speech_ids
from newsmotion_engine.speech.tts import TextSpeech, synthesize
from newsmotion_engine.speech.visemes import frame_count

INTRO = TextSpeech("Good evening, here is the news.")


def _leftovers(root):
    return [p.name for p in root.iterdir() if ".tmp-" in p.name or ".old-" in p.name] if root.is_dir() else []


def test_text_speech_cache_holds_audio_vad_visemes_and_timings(storage):
    cache, built = ensure_speech_cache(INTRO, storage, "intro", fps=25)
    assert built and cache.path == storage.speech_dir("intro") == speech_dir(storage.speech_root, "intro")
    assert isinstance(cache.audio, np.memmap) and cache.audio.dtype == np.float32 and cache.sample_rate == 16000
    assert cache.duration_s == pytest.approx(cache.audio.size / 16000)
    assert len(cache.visemes) == frame_count(cache.duration_s, 25) and cache.fps == 25
    assert cache.meta["viseme_source"] == "phonemes" and cache.meta["voice"] == "en-us"
    assert [w.text for w in cache.words] == ["Good", "evening", "here", "is", "the", "news"]
    assert cache.phonemes[0].symbol == "g"
    # One spoken stretch, covering the words.
    assert len(cache.vad) == 1 and cache.vad[0][0] < cache.words[0].start_s + 0.1
    assert cache.vad[0][1] > cache.words[-1].end_s - 0.1
    assert speech_problems(cache) == []
    assert speech_status(storage, "intro")[0] == "valid"
    again, built = ensure_speech_cache(INTRO, storage, "intro", fps=25)
    assert not built and again.digest == cache.digest


def test_a_recording_gets_visemes_from_the_audio(storage, tmp_path):
    speech = synthesize("Here is the news.", voice="en-gb-x-rp")
    stereo = np.stack([speech.samples, speech.samples], axis=1)
    wav = tmp_path / "take.wav"
    scipy.io.wavfile.write(wav, speech.sample_rate, stereo)
    cache, built = add_speech(storage, wav, "take")
    assert built and cache.meta["viseme_source"] == "audio" and cache.meta["original_channels"] == 2
    assert cache.phonemes == () and cache.words == () and len(cache.vad) == 1
    assert cache.meta["source"] == {"kind": "audio", "sha256": cache.meta["source"]["sha256"]}
    assert find_source(storage, "take").name == "take.wav"
    assert list_speech_ids(storage) == ["take"]


def test_a_changed_source_makes_the_cache_stale_and_a_build_replaces_it(storage):
    add_speech(storage, INTRO, "intro")
    install_source(storage, TextSpeech("Good night."), "intro")  # the kept source changes under it
    status, _, detail = speech_status(storage, "intro")
    assert status == "stale" and "changed" in detail
    rebuilt, built = ensure_speech_cache(None, storage, "intro")
    assert built and rebuilt.meta["text"] == "Good night." and speech_status(storage, "intro")[0] == "valid"
    # Other params (the frame rate) make it stale too.
    with pytest.raises(SpeechCacheError) as caught:
        load_speech_cache(storage, "intro", expected_params=cache_mod.speech_params(fps=50))
    assert caught.value.state == "stale"
    assert ensure_speech_cache(None, storage, "intro", fps=50)[1]


def test_a_damaged_cache_is_corrupt_and_rebuilt(storage):
    cache, _ = ensure_speech_cache(INTRO, storage, "intro")
    audio = cache.path / "audio.npy"
    audio.write_bytes(audio.read_bytes()[:-100])
    status, _, detail = speech_status(storage, "intro")
    assert status == "corrupt" and "audio.npy" in detail
    with pytest.raises(SpeechCacheError, match="newsmotion speech say"):
        load_speech_cache(storage, "intro")
    assert ensure_speech_cache(INTRO, storage, "intro")[1]
    assert speech_status(storage, "intro")[0] == "valid"


def test_invalid_content_is_reported(storage):
    cache, _ = ensure_speech_cache(INTRO, storage, "intro")
    meta = json.loads((cache.path / "metadata.json").read_text())
    meta["duration_s"] = 9.0
    (cache.path / "metadata.json").write_text(json.dumps(meta))
    status, _, detail = speech_status(storage, "intro")
    assert status == "invalid" and "viseme track has" in detail


def test_a_failed_build_keeps_the_old_cache_and_leaves_no_temporary_folder(storage, monkeypatch):
    old, _ = ensure_speech_cache(INTRO, storage, "intro")

    def broken(folder, built):
        np.save(folder / "audio.npy", np.zeros(3, np.float32))
        raise OSError("disk full")

    monkeypatch.setattr(cache_mod, "_write_files", broken)
    with pytest.raises(OSError, match="disk full"):
        ensure_speech_cache(TextSpeech("Something else."), storage, "intro")
    kept = load_speech_cache(storage, "intro")
    assert kept.digest == old.digest and kept.meta["text"] == INTRO.text
    assert _leftovers(storage.speech_root) == []


def test_bad_input_writes_nothing(storage, tmp_path):
    silent = tmp_path / "silent.wav"
    scipy.io.wavfile.write(silent, 16000, np.zeros(16000, np.float32))
    with pytest.raises(SpeechInputError, match="is silent"):
        add_speech(storage, silent, "quiet")
    with pytest.raises(SpeechInputError, match="is empty"):
        add_speech(storage, TextSpeech("  "), "quiet")
    assert not storage.speech_root.exists() or sorted(p.name for p in storage.speech_root.iterdir()) == []


def test_sample_speeches_are_varied_and_share_a_sign_off():
    speeches = samples_mod.SAMPLE_SPEECHES
    assert speeches["intro"].text == "Good evening, here is the news."
    assert len({s.voice for s in speeches.values()}) >= 4 and len({s.words_per_minute for s in speeches.values()}) >= 4
    signing_off = [s for s in speeches.values() if s.text.endswith(samples_mod.SIGN_OFF)]
    assert len(signing_off) == 2 and len({(s.voice, s.words_per_minute) for s in signing_off}) == 1
    for request in speeches.values():
        request.check()


def test_ensure_sample_speeches_is_idempotent_and_leaves_a_users_speech_alone(storage, monkeypatch):
    monkeypatch.setattr(samples_mod, "SAMPLE_SPEECHES", {"intro": INTRO, "night": TextSpeech("Good night.", "en", 200)})
    add_speech(storage, TextSpeech("My own words."), "night")
    assert samples_mod.ensure_sample_speeches(storage) == ["intro"]
    assert load_speech_cache(storage, "night").meta["text"] == "My own words."
    created = load_speech_cache(storage, "intro").meta["created_at"]
    assert samples_mod.ensure_sample_speeches(storage) == ["intro"]
    assert load_speech_cache(storage, "intro").meta["created_at"] == created
    assert find_source(storage, "intro").suffix == ".tts"
