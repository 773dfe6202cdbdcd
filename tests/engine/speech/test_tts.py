"""synthesize: real eSpeak NG speech with phoneme and word timings; bad requests are one
SpeechInputError each."""

import threading

import numpy as np
import pytest

from newsmotion_engine.speech.audio import SpeechInputError
from newsmotion_engine.speech.tts import MAX_TEXT_CHARS, VOICES, engine_version, synthesize

INTRO = "Good evening, here is the news."


def test_speaks_with_ordered_phoneme_and_word_timings():
    speech = synthesize(INTRO)
    assert speech.sample_rate == 22050 and speech.samples.dtype == np.float32
    assert 1.0 < speech.duration_s < 4.0
    assert 0.1 < float(np.abs(speech.samples).max()) <= 1.0
    assert [w.text for w in speech.words] == ["Good", "evening", "here", "is", "the", "news"]
    starts = [p.start_s for p in speech.phonemes]
    assert starts == sorted(starts) and len(speech.phonemes) > 15
    assert all(p.end_s > p.start_s for p in speech.phonemes)
    assert speech.phonemes[-1].end_s <= speech.duration_s + 1e-6
    # eSpeak's mnemonics: "Good" starts with /g/, "news" ends with /z/ then the closing pause.
    assert speech.phonemes[0].symbol == "g"
    assert "z" in [p.symbol for p in speech.phonemes[-3:]]
    # Words lie inside the audio and the comma's pause is not part of "evening".
    evening, here = speech.words[1], speech.words[2]
    assert evening.end_s < here.start_s
    assert speech.engine == engine_version() and speech.engine.startswith("espeak-ng ")


def test_the_audio_is_loud_where_the_words_are():
    speech = synthesize(INTRO)
    rate = speech.sample_rate
    gap = speech.samples[int(speech.words[1].end_s * rate) + 200:int(speech.words[2].start_s * rate) - 200]
    word = speech.samples[int(speech.words[1].start_s * rate):int(speech.words[1].end_s * rate)]
    assert np.sqrt(np.mean(word**2)) > 10 * np.sqrt(np.mean(gap**2) + 1e-12)


@pytest.mark.parametrize("voice", VOICES)
def test_every_listed_voice_speaks(voice):
    speech = synthesize("Here is the news.", voice=voice)
    assert speech.voice == voice and len(speech.words) == 4 and speech.duration_s > 0.5


def test_rate_changes_duration():
    slow = synthesize(INTRO, words_per_minute=120)
    fast = synthesize(INTRO, words_per_minute=260)
    assert slow.duration_s > 1.6 * fast.duration_s


def test_same_request_gives_the_same_samples_across_threads():
    results = []
    threads = [threading.Thread(target=lambda: results.append(synthesize(INTRO))) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 3
    assert all(np.array_equal(r.samples, results[0].samples) for r in results)


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        (dict(text="   "), "is empty"),
        (dict(text="x " * (MAX_TEXT_CHARS // 2 + 10)), "the limit is 5000"),
        (dict(text="hello", voice="klingon"), "is not a known voice"),
        (dict(text="hello", words_per_minute=20), "outside eSpeak's 80..450"),
        (dict(text="..."), "produced no speech"),
    ],
)
def test_bad_requests_are_one_line_errors(kwargs, needle):
    with pytest.raises(SpeechInputError) as caught:
        synthesize(**kwargs)
    assert needle in str(caught.value) and "\n" not in str(caught.value)


def test_no_phoneme_rounds_to_zero_length():
    # eSpeak closes this sentence with a pause marker a few microseconds before the audio ends
    s = synthesize("The city council has approved the new harbour bridge after two years of debate.")
    assert all(p.end_s > p.start_s for p in s.phonemes)
    assert s.phonemes[-1].end_s <= len(s.samples) / s.sample_rate + 1e-3
