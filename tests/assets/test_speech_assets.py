"""The speech partition: the inbox sensor (stable files, rejected/ with reasons, processed/), the
CLI's sources becoming partitions, the ``speech_cache`` asset and its blocking check."""

import dagster as dg
import numpy as np
import scipy.io.wavfile

from newsmotion_assets.assets.speech import speech_cache
from newsmotion_assets.checks import speech_cache_valid
from newsmotion_assets.partitions import speech_partitions
from newsmotion_assets.resources import StorageResource
from newsmotion_assets.retries import FAILURE_TAG
from newsmotion_assets.sensors import speech_inbox_sensor
from newsmotion_engine.speech.cache import load_speech_cache
from newsmotion_engine.speech.sources import add_speech, find_source
from newsmotion_engine.speech.tts import TextSpeech, synthesize

RESOURCES = {"storage": StorageResource()}  # root: $NEWSMOTION_STORAGE, this test's own folder


def _tick(instance, cursor=None):
    context = dg.build_sensor_context(instance=instance, cursor=cursor, resources=RESOURCES)
    result = speech_inbox_sensor(context)
    for request in result.dynamic_partitions_requests or []:
        instance.add_dynamic_partitions(request.partitions_def_name, list(request.partition_keys))
    return result


def _recording(path, text="Here is the news."):
    speech = synthesize(text)
    scipy.io.wavfile.write(path, speech.sample_rate, speech.samples)
    return path


def test_inbox_recordings_become_speeches_and_bad_files_are_rejected(storage):
    inbox = storage.speech_inbox
    inbox.mkdir(parents=True)
    good = _recording(inbox / "Evening News.wav")
    (inbox / "notes.wav").write_text("not audio")
    scipy.io.wavfile.write(inbox / "quiet.wav", 16000, np.zeros(16000, np.float32))
    (inbox / "script.txt").write_text("Good evening")
    add_speech(storage, TextSpeech("Good evening, here is the news."), "intro")  # `newsmotion speech say`
    with dg.instance_for_test() as instance:
        first = _tick(instance)
        # The CLI's speech is a partition at once; the wrong type leaves the inbox at once.
        assert [r.partition_key for r in first.run_requests] == ["intro"]
        assert (storage.speech_inbox_rejected / "script.txt.reason.txt").is_file()
        second = _tick(instance, first.cursor)  # unchanged once: not yet
        assert not second.run_requests and find_source(storage, "evening-news") is None
        third = _tick(instance, second.cursor)  # unchanged over two ticks: checked as speech, taken in
        assert [r.partition_key for r in third.run_requests] == ["evening-news"]
        assert sorted(instance.get_dynamic_partitions(speech_partitions.name)) == ["evening-news", "intro"]
        assert find_source(storage, "evening-news").read_bytes() == good.read_bytes()
        rejected = storage.speech_inbox_rejected
        assert "is not decodable audio" in (rejected / "notes.wav.reason.txt").read_text()
        assert "is silent" in (rejected / "quiet.wav.reason.txt").read_text()
        assert sorted(p.name for p in inbox.iterdir() if p.is_file()) == ["Evening News.wav"]

        # The asset builds it (visemes from the audio) and its blocking check passes.
        result = dg.materialize([speech_cache, speech_cache_valid], partition_key="evening-news",
                                instance=instance, resources=RESOURCES)
        assert result.success and [c.passed for c in result.get_asset_check_evaluations()] == [True]
        (mat,) = result.asset_materializations_for_node("speech_cache")
        meta = {k: v.value for k, v in mat.metadata.items()}
        cache = load_speech_cache(storage, "evening-news")
        assert meta["viseme_source"] == "audio" and meta["viseme_frames"] == len(cache.visemes)
        assert mat.tags["dagster/data_version"] == meta["digest"] == cache.digest
        assert "data:image/png;base64," in meta["visemes"]
        # Built: the recording leaves the inbox for processed/, nothing is requested again.
        fourth = _tick(instance, third.cursor)
        assert not fourth.run_requests and not (inbox / "Evening News.wav").exists()
        assert (storage.speech_inbox_processed / "Evening News.wav").is_file()


def test_the_check_fails_on_a_damaged_cache_and_a_speech_without_source_is_bad_input(storage):
    add_speech(storage, TextSpeech("Good night."), "night")
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(speech_partitions.name, ["night", "ghost"])
        path = storage.speech_dir("night") / "audio.npy"
        data = bytearray(path.read_bytes())
        data[-4:] = np.float32(0.25).tobytes()  # a plausible sample, same size: only the hash check sees it
        path.write_bytes(bytes(data))
        result = dg.materialize([speech_cache, speech_cache_valid], partition_key="night", instance=instance,
                                resources=RESOURCES, raise_on_error=False)
        (check,) = result.get_asset_check_evaluations()
        assert not check.passed and "sha256" in check.metadata["problem"].value

        result = dg.materialize([speech_cache], partition_key="ghost", instance=instance, resources=RESOURCES,
                                raise_on_error=False)
        assert not result.success
        (failure,) = result.get_step_failure_events()
        assert "unknown speech 'ghost'" in failure.event_specific_data.user_failure_data.description
        assert instance.get_run_by_id(result.run_id).tags[FAILURE_TAG] == "bad_input"
