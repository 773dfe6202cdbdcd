"""`newsmotion speech add/say/list/voices`: happy paths, and each bad input as one `error:` line,
exit 1 and nothing written."""

import subprocess

import numpy as np
import pytest
import scipy.io.wavfile

from newsmotion_engine.speech.tts import synthesize

from .conftest import run


def _nothing_written(storage):
    root = storage.speech_root
    return not root.exists() or [p.name for p in root.rglob("*")] == []


def test_say_list_and_replace(capsys, storage):
    code, out, _ = run(capsys, "speech", "say", "Good evening, here is the news.", "--id", "intro")
    assert code == 0 and "speech intro: built" in out and "from phonemes" in out
    code, out, _ = run(capsys, "speech", "say", "Good evening, here is the news.", "--id", "intro")
    assert code == 0 and "current, reused" in out
    code, _, err = run(capsys, "speech", "say", "Good night.", "--id", "intro", "--voice", "en")
    assert code == 1 and "already exists from another source" in err and err.count("\n") == 1
    code, out, _ = run(capsys, "speech", "say", "Good night.", "--id", "intro", "--voice", "en", "--wpm", "200", "--force")
    assert code == 0 and "built" in out
    code, out, _ = run(capsys, "speech", "list")
    assert code == 0 and "intro" in out and "tts en 200 wpm: Good night." in out and "valid" in out
    code, out, _ = run(capsys, "speech", "voices")
    assert code == 0 and "en-us (default)" in out


def test_add_a_stereo_recording(capsys, storage, tmp_path):
    speech = synthesize("Here is the news.")
    wav = tmp_path / "take.wav"
    scipy.io.wavfile.write(wav, speech.sample_rate, np.stack([speech.samples, 0.5 * speech.samples], axis=1))
    code, out, _ = run(capsys, "speech", "add", str(wav), "--id", "take")
    assert code == 0 and "speech take: built" in out and "from audio" in out
    assert (storage.speech_sources / "take.wav").is_file()


def _wav(path, samples, rate):
    scipy.io.wavfile.write(path, rate, np.asarray(samples, np.float32))
    return path


def _bytes(path, data):
    path.write_bytes(data)
    return path


def _tone(rate, seconds=1.0, amplitude=0.1):
    return amplitude * np.sin(2 * np.pi * 220 * np.arange(int(rate * seconds)) / rate)


def _three_hour_flac(path):
    """A FLAC whose header (STREAMINFO's total sample count) says 3 hours; its frames stop after
    10 min 2 s of silence, which is all the loader reads of a file past the 10-minute limit (so
    the test needs no 3-hour encode)."""
    from newsmotion_engine.video.encode import ffmpeg_exe

    subprocess.run([ffmpeg_exe(), "-hide_banner", "-loglevel", "error", "-f", "lavfi", "-i", "anullsrc=r=16000:cl=mono",
                    "-t", "602", "-c:a", "flac", str(path)], check=True)
    data = bytearray(path.read_bytes())
    # STREAMINFO starts at byte 8; bytes 18..25 hold rate (20 bits), channels, depth, total samples (36 bits).
    packed = int.from_bytes(data[18:26], "big")
    data[18:26] = ((packed & ~((1 << 36) - 1)) | (16000 * 3 * 3600)).to_bytes(8, "big")
    path.write_bytes(bytes(data))
    return path


BAD_FILES = {
    "empty.wav": (lambda p: _bytes(p, b""), "is empty (0 bytes)"),
    "notes.wav": (lambda p: _bytes(p, b"not audio at all"), "is not decodable audio"),
    "notes.txt": (lambda p: _bytes(p, b"hello"), "unsupported file type .txt"),
    "silent.wav": (lambda p: _wav(p, np.zeros(16000), 16000), "is silent"),
    "phone.wav": (lambda p: _wav(p, _tone(8000), 8000), "is sampled at 8000 Hz"),
    "clipped.wav": (lambda p: _wav(p, np.sign(_tone(16000, amplitude=1.0)), 16000), "is clipped"),
    "long.flac": (_three_hour_flac, "is 3:00:00.0 long; the limit is 10:00.0"),
    "missing.wav": (lambda p: p, "does not exist"),
}


@pytest.mark.parametrize("name", sorted(BAD_FILES))
def test_bad_recordings_are_one_line_errors_and_write_nothing(capsys, storage, tmp_path, name):
    make, needle = BAD_FILES[name]
    path = make(tmp_path / name)
    code, _, err = run(capsys, "speech", "add", str(path), "--id", "bad")
    assert code == 1 and err.startswith("error: ") and err.count("\n") == 1
    assert name in err and needle in err
    assert _nothing_written(storage)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["", "--id", "x"], "is empty"),
        (["hello", "--id", "x", "--voice", "klingon"], "is not a known voice"),
        (["hello", "--id", "x", "--wpm", "5"], "outside eSpeak's 80..450"),
        (["hello", "--id", "inbox"], "invalid speech id 'inbox'"),
        (["hello", "--id", "../up"], "invalid speech id"),
    ],
)
def test_bad_say_requests(capsys, storage, args, needle):
    code, _, err = run(capsys, "speech", "say", *args)
    assert code == 1 and needle in err and err.count("\n") == 1
    assert _nothing_written(storage)
