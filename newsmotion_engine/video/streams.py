"""Per-stream timestamps of a media file, and the audio/video sync of an mp4 read from them.

imageio-ffmpeg ships no ffprobe, so the timestamps come from the shipped ffmpeg itself: every
packet is stream-copied (no decoding) to ffmpeg's ``framecrc`` muxer, which prints, per stream,
its time base (``#tb 0: 1/15360``) and its media type, then one line per packet: stream index,
dts, pts, duration (in that time base), size, checksum and side data. A stream's presentation
starts at its smallest pts and ends at its largest pts + duration. AAC priming packets (pts < 0,
marked "Skip Samples": the encoder's start-up samples that the mp4 edit list tells players to
drop) are not presented, so an audio stream starts at ``max(smallest pts, 0)``.

Example::

    sync = av_sync("story.mp4", fps=30)
    sync.has_audio, sync.video_s, sync.audio_s, sync.offset_frames   # True, 9.0, 9.0, 0.0
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from newsmotion_engine.errors import BadInputError
from newsmotion_engine.video.encode import ffmpeg_exe

__all__ = ["AvSync", "StreamTiming", "av_sync", "stream_timings"]

_TIME_BASE = re.compile(r"^#tb (\d+): (\d+)/(\d+)$")
_MEDIA_TYPE = re.compile(r"^#media_type (\d+): (\w+)$")
_CODEC = re.compile(r"^#codec_id (\d+): (\w+)$")


@dataclass(frozen=True)
class StreamTiming:
    """One stream's presentation span in seconds, from its packets' timestamps."""

    index: int
    media_type: str  # "video", "audio", ...
    codec: str
    start_s: float
    end_s: float
    packets: int

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s


def stream_timings(path: Path | str, *, ffmpeg: str | None = None) -> list[StreamTiming]:
    """Every stream of ``path`` with its start, end and packet count (see the module docstring).

    Raises:
        BadInputError: missing file, or ffmpeg cannot read it.
    """
    path = Path(path)
    if not path.is_file():
        raise BadInputError(path, "file not found")
    cmd = [ffmpeg or ffmpeg_exe(), "-hide_banner", "-nostdin", "-loglevel", "error", "-i", str(path),
           "-map", "0", "-c", "copy", "-f", "framecrc", "-"]  # fmt: skip
    res = subprocess.run(cmd, capture_output=True, timeout=120)
    if res.returncode != 0:
        tail = " | ".join(res.stderr.decode("utf-8", "replace").strip().splitlines()[-3:])
        raise BadInputError(path, f"not a readable media file ({tail})")
    time_base: dict[int, float] = {}
    media: dict[int, str] = {}
    codec: dict[int, str] = {}
    span: dict[int, list[float]] = {}  # index -> [first pts, last end, packets, first packet skips samples]
    for line in res.stdout.decode("utf-8", "replace").splitlines():
        if line.startswith("#"):
            for pattern, table in ((_MEDIA_TYPE, media), (_CODEC, codec)):
                if m := pattern.match(line):
                    table[int(m[1])] = m[2]
            if m := _TIME_BASE.match(line):
                time_base[int(m[1])] = int(m[2]) / int(m[3])
            continue
        fields = [f.strip() for f in line.split(",")]
        if len(fields) < 4:
            continue
        index, pts, duration = int(fields[0]), int(fields[2]), int(fields[3])
        tb = time_base[index]
        start, end = pts * tb, (pts + duration) * tb
        if index not in span:
            span[index] = [start, end, 0, "Skip Samples" in line]
        entry = span[index]
        entry[0] = min(entry[0], start)
        entry[1] = max(entry[1], end)
        entry[2] += 1
    out = []
    for index in sorted(span):
        first, last, packets, priming = span[index]
        out.append(StreamTiming(index, media.get(index, "unknown"), codec.get(index, "unknown"),
                                max(first, 0.0) if priming else first, last, int(packets)))  # fmt: skip
    return out


@dataclass(frozen=True)
class AvSync:
    """How the first audio stream of an mp4 lines up with its first video stream.

    ``start_offset_s``: audio start minus video start; ``end_offset_s``: audio end minus video
    end; ``offset_frames``: the larger of the two in video frames (``None`` without audio).
    ``in_sync``: an audio stream is there and both offsets are within ``tolerance_frames``.
    """

    has_audio: bool
    video_s: float
    audio_s: float | None
    start_offset_s: float | None
    end_offset_s: float | None
    offset_frames: float | None
    tolerance_frames: float
    audio_codec: str | None

    @property
    def in_sync(self) -> bool:
        return self.has_audio and self.offset_frames is not None and self.offset_frames <= self.tolerance_frames

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "in_sync": self.in_sync}


def av_sync(path: Path | str, fps: float, *, tolerance_frames: float = 1.0, ffmpeg: str | None = None) -> AvSync:
    """Compare the audio and video streams of ``path`` from their timestamps.

    Raises:
        BadInputError: unreadable file, or no video stream.
    """
    streams = stream_timings(path, ffmpeg=ffmpeg)
    video = next((s for s in streams if s.media_type == "video"), None)
    if video is None:
        raise BadInputError(path, "no video stream")
    audio = next((s for s in streams if s.media_type == "audio"), None)
    if audio is None:
        return AvSync(False, round(video.duration_s, 4), None, None, None, None, tolerance_frames, None)
    start = audio.start_s - video.start_s
    end = audio.end_s - video.end_s
    return AvSync(
        True, round(video.duration_s, 4), round(audio.duration_s, 4), round(start, 4), round(end, 4),
        round(max(abs(start), abs(end)) * fps, 3), tolerance_frames, audio.codec,
    )  # fmt: skip
