"""A story's speech: sentences through the speech tier, laid out on the frame grid."""

import numpy as np
import pytest

from newsmotion_engine.errors import CacheNotReadyError
from newsmotion_engine.story.format import StoryError, parse_story
from newsmotion_engine.story.speech import story_speech

FPS = 30


def story(tmp_path, *sentences, **extra):
    return parse_story({"persona": "a", "speech": list(sentences), **extra}, tmp_path / "evening.yaml")


def test_sentences_are_laid_out_on_frame_boundaries(storage, tmp_path):
    s = story(tmp_path, {"id": "intro", "text": "Good evening, here is the news."}, {"id": "intro"},
              lead_in=0.5, pause=0.2, tail=0.3)  # fmt: skip
    speech = story_speech(s, storage, FPS)
    (a0, b0), (a1, b1) = speech.spans
    assert a0 == 15 and a1 == b0 + 6 and speech.frames == b1 + 9
    assert speech.audio.shape[0] == round(speech.frames / FPS * speech.sample_rate)  # exactly the video's length
    assert len(speech.visemes) == speech.frames and speech.visemes.fps == FPS
    # Silence and a closed mouth outside the sentences; the same speech twice, sample for sample.
    rate = speech.sample_rate
    assert not speech.audio[: a0 * rate // FPS].any() and not speech.visemes.open[:a0].any()
    first = speech.audio[a0 * rate // FPS : b0 * rate // FPS]
    second = speech.audio[round(a1 * rate / FPS) : round(a1 * rate / FPS) + first.shape[0]]
    np.testing.assert_array_equal(first, second)
    assert [x["state"] for x in speech.sentences] == ["built", "hit"]


def test_an_id_holding_other_speech_is_refused(storage, tmp_path):
    story_speech(story(tmp_path, {"id": "intro", "text": "Good evening."}), storage, FPS)
    with pytest.raises(StoryError, match=r"speech\[0\]\.id: .*already exists from another source.*give this sentence another id"):
        story_speech(story(tmp_path, {"id": "intro", "text": "Good night."}), storage, FPS)


def test_an_unknown_speech_id_names_what_to_materialize(storage, tmp_path):
    with pytest.raises(CacheNotReadyError, match=r"speech cache 'nowhere' \(evening.yaml: speech\[0\]\.id\) is missing: materialize speech_cache\[nowhere\]"):
        story_speech(story(tmp_path, {"id": "nowhere"}), storage, FPS)
