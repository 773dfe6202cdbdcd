"""load_speech: good files load at 16 kHz mono at the target level; each bad input is one
SpeechInputError naming the file and the problem."""

import math
import subprocess
import wave

import imageio_ffmpeg
import numpy as np
import pytest

from newsmotion_engine.errors import BadInputError, NewsmotionError
from newsmotion_engine.speech.audio import SpeechInputError, active_rms, dbfs, load_speech


def _write_wav(path, samples, rate, channels=1):
    """``samples``: float array [n] or [n, channels] in [-1, 1], written as 16-bit PCM."""
    data = np.clip(np.asarray(samples, dtype=np.float64), -1.0, 1.0)
    pcm = np.round(data * 32767).astype("<i2")
    with wave.open(str(path), "wb") as out:
        out.setnchannels(channels)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes(pcm.tobytes())
    return path


def _tone(rate, seconds=1.0, freq=440.0, amplitude=0.1):
    t = np.arange(int(rate * seconds)) / rate
    return amplitude * np.sin(2 * math.pi * freq * t)


def _refused(path, **kwargs):
    with pytest.raises(SpeechInputError) as caught:
        load_speech(path, **kwargs)
    message = str(caught.value)
    assert str(path) in message
    assert "\n" not in message
    return message


def test_a_mono_tone_loads_at_16khz_normalised_to_minus_20_dbfs(tmp_path):
    path = _write_wav(tmp_path / "tone.wav", _tone(44100, amplitude=0.05), 44100)
    speech = load_speech(path)
    assert speech.sample_rate == 16000
    assert speech.samples.dtype == np.float32 and speech.samples.ndim == 1
    assert abs(speech.duration_s - 1.0) < 0.01
    assert (speech.original_sample_rate, speech.original_channels) == (44100, 1)
    assert abs(dbfs(active_rms(speech.samples, 16000)) - (-20.0)) < 0.2
    assert speech.source == path
    assert not speech.samples.flags.writeable


def test_normalisation_never_pushes_the_peak_above_minus_1_dbfs(tmp_path):
    # A quiet click track: reaching -20 dBFS RMS would need a peak far above full scale.
    clicks = np.zeros(16000)
    clicks[::1600] = 0.02
    speech = load_speech(_write_wav(tmp_path / "clicks.wav", clicks, 16000))
    assert dbfs(float(np.max(np.abs(speech.samples)))) <= -1.0 + 1e-3
    assert dbfs(active_rms(speech.samples, 16000)) < -20.0


def test_stereo_is_downmixed_to_mono(tmp_path):
    left = _tone(48000, freq=440.0)
    right = _tone(48000, freq=660.0)
    path = _write_wav(tmp_path / "stereo.wav", np.stack([left, right], axis=1), 48000, channels=2)
    speech = load_speech(path)
    assert speech.samples.ndim == 1 and speech.original_channels == 2
    spectrum = np.abs(np.fft.rfft(speech.samples))
    freqs = np.fft.rfftfreq(speech.samples.size, 1 / 16000)
    strongest = sorted(freqs[np.argsort(spectrum)[-2:]].round())
    assert strongest == [440.0, 660.0]


def test_compressed_containers_decode(tmp_path):
    ffmpeg = imageio_ffmpeg.get_ffmpeg_exe()
    for name in ("speech.flac", "speech.mp3", "speech.m4a", "speech.ogg"):
        path = tmp_path / name
        subprocess.run([ffmpeg, "-hide_banner", "-nostdin", "-v", "error", "-f", "lavfi", "-i",
                        "sine=frequency=300:duration=1:sample_rate=22050", str(path)], check=True)
        speech = load_speech(path)
        assert speech.original_sample_rate == 22050
        assert abs(speech.duration_s - 1.0) < 0.1


def test_missing_file(tmp_path):
    assert "does not exist" in _refused(tmp_path / "nowhere.wav")


def test_zero_byte_file(tmp_path):
    path = tmp_path / "empty.wav"
    path.write_bytes(b"")
    assert "empty (0 bytes)" in _refused(path)


def test_a_text_file_named_wav_is_not_decodable(tmp_path):
    path = tmp_path / "notes.wav"
    path.write_text("this is a script, not a recording\n")
    assert "not decodable audio" in _refused(path)


def test_a_video_without_sound_has_no_audio_stream(tmp_path):
    path = tmp_path / "mute.mp4"
    subprocess.run([imageio_ffmpeg.get_ffmpeg_exe(), "-hide_banner", "-nostdin", "-v", "error", "-f", "lavfi", "-i",
                    "color=c=red:s=64x64:d=1", str(path)], check=True)
    assert "has no audio stream" in _refused(path)


def test_a_directory_is_not_a_file(tmp_path):
    assert "is not a file" in _refused(tmp_path)


def test_silence(tmp_path):
    message = _refused(_write_wav(tmp_path / "silence.wav", np.zeros(16000), 16000))
    assert "silent" in message


def test_8khz_telephone_audio_is_refused_with_the_reason(tmp_path):
    message = _refused(_write_wav(tmp_path / "phone.wav", _tone(8000), 8000))
    assert "8000 Hz" in message and "below the 16000 Hz" in message


def test_a_clipped_square_wave_is_refused_with_the_share(tmp_path):
    square = np.sign(_tone(16000, amplitude=1.0))
    message = _refused(_write_wav(tmp_path / "clipped.wav", square, 16000))
    assert "clipped" in message
    share = float(message.split("clipped: ")[1].split("%")[0])
    assert share > 90.0


def test_longer_than_the_limit(tmp_path):
    path = _write_wav(tmp_path / "long.wav", _tone(16000, seconds=3.0), 16000)
    message = _refused(path, max_duration_s=2.0)
    assert "0:03.0 long" in message and "limit is 0:02.0" in message
    assert load_speech(path, max_duration_s=4.0).duration_s == pytest.approx(3.0, abs=0.01)


def test_the_error_is_the_projects_bad_input_error():
    assert issubclass(SpeechInputError, BadInputError) and issubclass(SpeechInputError, NewsmotionError)
