"""Loading a speech file: decode, check, downmix, resample and loudness-normalise.

``load_speech(path)`` decodes wav, mp3, m4a, flac or ogg (anything the project's ffmpeg,
:func:`newsmotion_engine.video.encode.ffmpeg_exe`, can read) and returns a :class:`Speech`: 16 kHz mono float32 samples.

Checks, each refused with one :class:`SpeechInputError` that names the file and the problem:
missing or 0-byte file, not decodable audio (wrong container, no audio stream), longer than
``max_duration_s`` (10 minutes by default), a native sample rate below 16 kHz (telephone audio
lacks the band above 4 kHz that the audio encoders were trained on, so upsampling would only hide
the problem), clipped (more than ``max_clipped_share`` of the samples at full scale) and silent
(every sample below ``silence_dbfs``).

Stereo and multichannel input is accepted and downmixed to mono (the channels are averaged by
ffmpeg's ``-ac 1``).

Loudness normalisation is RMS-based and peak-safe: the RMS is measured over the active 20 ms
frames only (frames whose RMS is above ``silence_dbfs``, so pauses do not pull the level down),
the gain brings that RMS to ``target_dbfs`` (-20 dBFS by default), and the gain is lowered when
it would push the sample peak above ``peak_ceiling_dbfs`` (-1 dBFS), so normalising never clips.
"""

from __future__ import annotations

import hashlib
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from newsmotion_engine.errors import BadInputError
from newsmotion_engine.video.encode import ffmpeg_exe

SPEECH_SAMPLE_RATE = 16000
DEFAULT_MAX_DURATION_S = 600.0
DEFAULT_TARGET_DBFS = -20.0
DEFAULT_PEAK_CEILING_DBFS = -1.0
DEFAULT_SILENCE_DBFS = -60.0
DEFAULT_MAX_CLIPPED_SHARE = 0.01
# A decoded 16-bit sample at full scale is 32767/32768; lossy decoders can overshoot 1.0.
FULL_SCALE = 0.999
_FRAME_S = 0.02

# ffmpeg names channel layouts rather than counting them.
_LAYOUT_CHANNELS = {"mono": 1, "stereo": 2, "2.1": 3, "3.0": 3, "3.0(back)": 3, "quad": 4, "4.0": 4,
                    "quad(side)": 4, "4.1": 5, "5.0": 5, "5.0(side)": 5, "5.1": 6, "5.1(side)": 6,
                    "6.0": 6, "6.1": 7, "7.0": 7, "7.1": 8, "7.1(wide)": 8}


class SpeechInputError(BadInputError):
    """A speech file that cannot be used: ``SpeechInputError(path, problem)`` reads
    ``"<path>: <problem>"``."""


@dataclass(frozen=True, eq=False)
class Speech:
    """Decoded speech: ``samples`` is read-only 16 kHz mono float32 after normalisation.
    ``original_sample_rate`` and ``original_channels`` are what ffmpeg reported for the file's
    audio stream (None when it did not say); ``gain_db`` is the normalisation gain applied."""

    samples: np.ndarray
    source: Path
    duration_s: float
    sample_rate: int = SPEECH_SAMPLE_RATE
    original_sample_rate: int | None = None
    original_channels: int | None = None
    gain_db: float = 0.0


@dataclass(frozen=True, eq=False)
class SpeechTrack:
    """The sound a render performs, handed to a backend that hears audio with the frames it should
    speak (``frames(..., speech=track)``, :func:`~newsmotion_engine.render.base.check_speech`).

    ``samples``: float32 mono at 16 kHz, exactly as long as the clip. ``label``: where it came
    from, for records (``"story evening_news"``). ``cache_root``: a speech root under which a
    backend may keep what it derives from the audio (its encoder features, under
    ``clips/{digest}/``); ``None``: derived data is computed and not kept. ``digest``: sha256 of the
    rate and the samples (what those caches are keyed on).

    Example::

        track = SpeechTrack(story_speech.audio, label="story evening", cache_root=storage.speech_root)
        backend.frames(clip, persona, keypoints, spec, speech=track)
    """

    samples: np.ndarray
    label: str
    cache_root: Path | None = None
    sample_rate: int = SPEECH_SAMPLE_RATE
    digest: str = field(init=False)

    def __post_init__(self) -> None:
        samples = np.ascontiguousarray(self.samples, dtype=np.float32)
        if samples.ndim != 1 or samples.size == 0:
            raise ValueError(f"a speech track is mono samples [N > 0], got shape {list(samples.shape)}")
        if self.sample_rate != SPEECH_SAMPLE_RATE:
            raise ValueError(f"a speech track is at {SPEECH_SAMPLE_RATE} Hz, got {self.sample_rate} Hz (load it with load_speech)")
        digest = hashlib.sha256(f"speech track rate={self.sample_rate}".encode())
        digest.update(samples.tobytes())
        object.__setattr__(self, "samples", samples)
        object.__setattr__(self, "digest", digest.hexdigest())

    @property
    def duration_s(self) -> float:
        return self.samples.shape[0] / self.sample_rate


@dataclass(frozen=True)
class _StreamInfo:
    sample_rate: int | None
    channels: int | None
    duration_s: float | None


def _parse_input_info(stderr: str) -> _StreamInfo | None:
    """The first audio stream of ``Input #0`` in ffmpeg's banner, or None when it has none."""
    # ffmpeg also prints the output stream after these markers; only the input's is the file's.
    head = re.split(r"^(?:Output #0|Stream mapping:)", stderr, maxsplit=1, flags=re.M)[0]
    stream = re.search(r"Stream #0:\d+.*?: Audio: (.*)", head)
    if stream is None:
        return None
    desc = stream.group(1)
    rate = re.search(r"(\d+) Hz", desc)
    channels = None
    if rate:
        token = desc[rate.end():].lstrip(", ").split(",")[0].strip()
        counted = re.fullmatch(r"(\d+) channels(?: \(.*\))?", token)
        channels = int(counted.group(1)) if counted else _LAYOUT_CHANNELS.get(token)
    duration = None
    found = re.search(r"Duration: (\d+):(\d+):(\d+(?:\.\d+)?)", head)
    if found:
        hours, minutes, seconds = found.groups()
        duration = int(hours) * 3600 + int(minutes) * 60 + float(seconds)
    return _StreamInfo(int(rate.group(1)) if rate else None, channels, duration)


def _ffmpeg_problem(stderr: str) -> str:
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    return lines[-1] if lines else "ffmpeg gave no reason"


def _format_duration(seconds: float) -> str:
    minutes, secs = divmod(seconds, 60)
    hours, minutes = divmod(int(minutes), 60)
    return f"{hours}:{minutes:02d}:{secs:04.1f}" if hours else f"{minutes}:{secs:04.1f}"


def _decode_native(path: Path, max_duration_s: float) -> tuple[np.ndarray, _StreamInfo]:
    """Decode the first audio stream at its own rate and channel count, as ``[samples, channels]``
    float32, reading at most a second past the limit (so a 3-hour file is not decoded whole)."""
    cmd = [ffmpeg_exe(), "-hide_banner", "-nostdin", "-t", f"{max_duration_s + 1.0:.3f}", "-i", str(path),
           "-map", "0:a:0", "-vn", "-f", "f32le", "-acodec", "pcm_f32le", "pipe:1"]
    proc = subprocess.run(cmd, capture_output=True)
    stderr = proc.stderr.decode("utf-8", "replace")
    info = _parse_input_info(stderr)
    if proc.returncode != 0:
        if info is None and "Input #0" in stderr:
            raise SpeechInputError(path, "has no audio stream")
        raise SpeechInputError(path, f"is not decodable audio ({_ffmpeg_problem(stderr)})")
    if info is None:
        raise SpeechInputError(path, "has no audio stream")
    raw = np.frombuffer(proc.stdout, dtype="<f4")
    if info.channels is None:
        # Guessing the count would interleave the channels wrongly; refuse instead.
        raise SpeechInputError(path, "has an audio channel layout whose channel count ffmpeg did not report")
    usable = raw.size - raw.size % info.channels
    return raw[:usable].reshape(-1, info.channels), info


def _to_speech_rate(native: np.ndarray, rate: int) -> np.ndarray:
    """Downmix and resample with ffmpeg (piped through memory), so resampling is ffmpeg's filter."""
    channels = native.shape[1]
    cmd = [ffmpeg_exe(), "-hide_banner", "-nostdin", "-f", "f32le", "-ar", str(rate), "-ac", str(channels),
           "-i", "pipe:0", "-ac", "1", "-ar", str(SPEECH_SAMPLE_RATE), "-f", "f32le", "-acodec", "pcm_f32le", "pipe:1"]
    proc = subprocess.run(cmd, input=np.ascontiguousarray(native, dtype="<f4").tobytes(), capture_output=True)
    if proc.returncode != 0:
        raise RuntimeError(f"ffmpeg resampling failed: {_ffmpeg_problem(proc.stderr.decode('utf-8', 'replace'))}")
    return np.frombuffer(proc.stdout, dtype="<f4").astype(np.float32)


def dbfs(value: float) -> float:
    """Level in dB relative to full scale (1.0); -inf for 0."""
    return float(20.0 * np.log10(value)) if value > 0 else float("-inf")


def active_rms(samples: np.ndarray, sample_rate: int, silence_dbfs: float = DEFAULT_SILENCE_DBFS) -> float:
    """RMS over the 20 ms frames whose own RMS is above ``silence_dbfs`` (0.0 when none is)."""
    frame = max(1, int(round(_FRAME_S * sample_rate)))
    count = samples.size // frame
    if count == 0:
        frames = samples[None, :].astype(np.float64)
    else:
        frames = samples[: count * frame].reshape(count, frame).astype(np.float64)
    power = np.mean(frames**2, axis=1)
    active = power > 10.0 ** (silence_dbfs / 10.0)
    return float(np.sqrt(np.mean(power[active]))) if active.any() else 0.0


def load_speech(path: Path | str, *, max_duration_s: float = DEFAULT_MAX_DURATION_S,
                target_dbfs: float = DEFAULT_TARGET_DBFS, peak_ceiling_dbfs: float = DEFAULT_PEAK_CEILING_DBFS,
                silence_dbfs: float = DEFAULT_SILENCE_DBFS,
                max_clipped_share: float = DEFAULT_MAX_CLIPPED_SHARE) -> Speech:
    """Decode ``path`` to 16 kHz mono float32, check it and normalise its loudness (see the module
    docstring for the checks and the normalisation). Raises :class:`SpeechInputError`."""
    path = Path(path)
    if not path.exists():
        raise SpeechInputError(path, "does not exist")
    if not path.is_file():
        raise SpeechInputError(path, "is not a file")
    if path.stat().st_size == 0:
        raise SpeechInputError(path, "is empty (0 bytes)")

    native, info = _decode_native(path, max_duration_s)
    rate = info.sample_rate
    if rate is None:
        raise SpeechInputError(path, "has an audio stream whose sample rate ffmpeg did not report")
    if native.shape[0] == 0:
        raise SpeechInputError(path, "has an audio stream with no samples")
    decoded_s = native.shape[0] / rate
    if decoded_s > max_duration_s:
        length = info.duration_s if info.duration_s and info.duration_s > max_duration_s else None
        said = f"is {_format_duration(length)} long" if length else "is longer than that"
        raise SpeechInputError(path, f"{said}; the limit is {_format_duration(max_duration_s)}")
    if rate < SPEECH_SAMPLE_RATE:
        raise SpeechInputError(path, f"is sampled at {rate} Hz, below the {SPEECH_SAMPLE_RATE} Hz speech needs "
                                     "(narrow-band audio, e.g. telephone; upsampling cannot restore the missing band)")
    peak = float(np.max(np.abs(native)))
    if dbfs(peak) < silence_dbfs:
        raise SpeechInputError(path, f"is silent (peak {dbfs(peak):.1f} dBFS, below {silence_dbfs:.0f} dBFS)")
    # Clipping is judged on the native samples: resampling smooths flat tops and would hide it.
    clipped_share = float(np.mean(np.abs(native) >= FULL_SCALE))
    if clipped_share > max_clipped_share:
        raise SpeechInputError(path, f"is clipped: {clipped_share:.1%} of the samples are at full scale "
                                     f"(at most {max_clipped_share:.1%} allowed)")

    mono = _to_speech_rate(native, rate)
    rms = active_rms(mono, SPEECH_SAMPLE_RATE, silence_dbfs)
    mono_peak = float(np.max(np.abs(mono)))
    if rms == 0.0 or mono_peak == 0.0:
        # Channels in opposite phase cancel in the downmix.
        raise SpeechInputError(path, "is silent once downmixed to mono (channels cancel out)")
    gain_db = min(target_dbfs - dbfs(rms), peak_ceiling_dbfs - dbfs(mono_peak))
    samples = (mono * np.float32(10.0 ** (gain_db / 20.0))).astype(np.float32)
    samples.flags.writeable = False
    return Speech(samples=samples, source=path, duration_s=samples.size / SPEECH_SAMPLE_RATE,
                  original_sample_rate=rate, original_channels=info.channels, gain_db=gain_db)


def write_wav(path: Path | str, samples: np.ndarray, sample_rate: int) -> Path:
    """``samples`` (float mono in [-1, 1]) as a 16-bit PCM wav: what ffmpeg muxes beside a video."""
    import wave

    path = Path(path)
    pcm = (np.clip(np.asarray(samples, np.float32), -1.0, 1.0) * 32767.0).round().astype("<i2")
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(int(sample_rate))
        out.writeframes(pcm.tobytes())
    return path
