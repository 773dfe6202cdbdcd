"""Streaming h264 encoding with the ffmpeg binary, and a small mp4 probe.

Frames go over a pipe into an ffmpeg process while the caller keeps rendering, so the clip is
never held in memory and encoding (a separate process) overlaps rendering. A small writer thread
with a bounded queue does the pipe writes, so a numpy/OpenCV render of frame n+1 (which releases
the GIL) overlaps the write of frame n.

By default the writer thread converts each RGB frame to yuv420p itself (OpenCV, BT.601 limited
range: the same conversion ffmpeg applies to rgb24 input, colours equal within 1 level) and pipes
that: half the bytes of rgb24, and it takes the colour conversion off ffmpeg, which costs it more
CPU per frame than the conversion costs here (the warp benchmark's encode figures,
``benchmarks/results/warp.json``). ``pipe_format="rgb24"`` pipes RGB.

The binary comes from ``$NEWSMOTION_FFMPEG``, else ``ffmpeg`` on PATH, else the one the
imageio-ffmpeg wheel ships (a fresh machine needs no system package). ``h264_nvenc`` is used only
when a one-off probe encode with it succeeds in this process (cached); otherwise libx264. The
output is h264, yuv420p, ``+faststart`` (the index at the front, so a browser starts playing at
once).

The file is written under a temporary name next to the target (:data:`TEMP_NAME`:
``.{stem}.{pid}.{hex}.tmp.mp4``) and renamed into place only when ffmpeg succeeded, so a failure
(missing binary, killed process, an exception in the frame source) never leaves a partial mp4 at
the target path. An abort (an exception or Ctrl-C while frames are coming) kills ffmpeg and removes
the temporary file first thing, in a ``finally``, so a second interrupt arriving while it waits for
ffmpeg still leaves nothing; one that lands before the abort starts is covered by a finalizer that
runs at interpreter exit. ffmpeg runs in its own process group: a terminal's Ctrl-C (SIGINT to
the foreground group) reaches only Python, which stops ffmpeg itself — ffmpeg catching SIGINT would
otherwise finish the file it has, a header-only mp4. A process killed outright (SIGKILL, an
out-of-memory kill) runs no cleanup; its temporary file is what
:mod:`newsmotion_engine.sweep` removes.

Example::

    with VideoEncoder("out.mp4", 720, 1280, 30) as enc:
        for frame in frames:          # uint8 RGB [1280, 720, 3]
            enc.write(frame)
    enc.encoder, enc.mux_ms           # "libx264", 41.3
"""

from __future__ import annotations

import functools
import os
import queue
import re
import shutil
import subprocess
import tempfile
import threading
import time
import uuid
import weakref
from pathlib import Path
from typing import Any

import cv2
import ffmpeg
import numpy as np

from newsmotion_engine.errors import BadInputError, NewsmotionError

__all__ = [
    "AUDIO_CODEC_ARGS",
    "EncoderError",
    "TEMP_NAME",
    "VideoEncoder",
    "check_output_folder",
    "ffmpeg_exe",
    "nvenc_available",
    "probe_video",
]

# The encoder's temporary file beside ``{stem}.mp4``: ``.{stem}.{pid}.{8 hex}.tmp.mp4``; group
# ``stem`` is the finished file's stem (the sweep uses it to find the clip's lock).
TEMP_NAME = re.compile(r"^\.(?P<stem>.+)\.(?P<pid>\d+)\.[0-9a-f]{8}\.tmp\.mp4$")


# The writability probe :func:`check_output_folder` creates and removes at once.
TEMP_PROBE = re.compile(r"^\.(?P<name>.+)\.[0-9a-f]{8}\.probe$")

# libx264 preset, chosen by measurement (2 cores, 720x1280, a 120-frame warp render of the
# sample persona, crf 20): ultrafast 2224 KiB, 39.5 dB PSNR, 200 fps encode-only; superfast
# 465 KiB, 39.3 dB, 162 fps; veryfast 196 KiB, 38.7 dB, 124 fps. Superfast gives ~5x smaller
# files at the same quality for ~1 ms more CPU per frame; end to end (render + encode) it still
# runs ~95-120 fps against the 60 fps target, where veryfast starts eating the margin.
DEFAULT_PRESET = "superfast"
DEFAULT_CRF = 20
# Muxed audio: AAC-LC at 48 kHz, the rate every browser and player takes.
AUDIO_CODEC_ARGS = {"acodec": "aac", "audio_bitrate": "96k", "ar": 48000}
_STDERR_TAIL = 1500


class EncoderError(NewsmotionError):
    """ffmpeg could not produce the file: ``EncoderError(output_path, problem)``."""

    def __init__(self, path: Path | str, problem: str):
        self.path = Path(path)
        self.problem = problem
        super().__init__(f"{path}: {problem}")


def ffmpeg_exe() -> str:
    """Path of the ffmpeg binary: ``$NEWSMOTION_FFMPEG``, ``ffmpeg`` on PATH, or imageio-ffmpeg's.

    Raises:
        NewsmotionError: none found (with how to fix it).
    """
    env = os.environ.get("NEWSMOTION_FFMPEG")
    if env:
        if not (os.path.isfile(env) and os.access(env, os.X_OK)):
            raise NewsmotionError(f"$NEWSMOTION_FFMPEG={env!r} is not an executable file")
        return env
    on_path = shutil.which("ffmpeg")
    if on_path:
        return on_path
    try:
        import imageio_ffmpeg

        return imageio_ffmpeg.get_ffmpeg_exe()
    except Exception as exc:  # imageio-ffmpeg raises RuntimeError when its binary is missing
        raise NewsmotionError(
            f"no ffmpeg binary: none on PATH and imageio-ffmpeg has none ({exc}); "
            "install ffmpeg or `pip install imageio-ffmpeg`"
        ) from exc


@functools.lru_cache(maxsize=None)
def nvenc_available(exe: str) -> bool:
    """Whether ``exe`` can really encode with h264_nvenc here: a tiny probe encode, run once per
    (process, binary). Listing the encoder proves nothing (a CPU box lists it but has no driver)."""
    cmd = [
        exe, "-hide_banner", "-loglevel", "error", "-nostdin",
        "-f", "lavfi", "-i", "color=c=black:s=256x256:r=30", "-frames:v", "3",
        "-c:v", "h264_nvenc", "-f", "null", "-",
    ]  # fmt: skip
    try:
        return subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def check_output_folder(path: Path | str) -> Path:
    """Fail early, before any rendering, if ``path``'s folder is missing or not writable.

    Returns the absolute path. Raises ``BadInputError(path, problem)``.
    """
    path = Path(path).absolute()
    folder = path.parent
    if not folder.exists():
        raise BadInputError(path, f"output folder {folder} does not exist")
    if not folder.is_dir():
        raise BadInputError(path, f"output folder {folder} is not a folder")
    if path.is_dir():
        raise BadInputError(path, "output path is a folder, not a file name")
    # os.access alone is not enough (root ignores permission bits; read-only mounts and immutable
    # folders refuse anyway), so also really create and remove a file there.
    if not os.access(folder, os.W_OK | os.X_OK):
        raise BadInputError(path, f"output folder {folder} is not writable")
    probe = folder / f".{path.name}.{uuid.uuid4().hex[:8]}.probe"
    try:
        fd = os.open(probe, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise BadInputError(path, f"output folder {folder} is not writable ({exc.strerror})") from None
    return path


def _tail(f: Any) -> str:
    try:
        f.flush()
        f.seek(0, os.SEEK_END)
        size = f.tell()
        f.seek(max(0, size - _STDERR_TAIL))
        text = f.read().decode("utf-8", "replace").strip()
    except (OSError, ValueError):
        return ""
    return " | ".join(line.strip() for line in text.splitlines() if line.strip())


class VideoEncoder:
    """Stream uint8 RGB frames into an h264 mp4 (context manager; see the module docstring).

    Args:
        path: target ``.mp4``; its folder must exist and be writable (checked at once).
        width, height: frame size, even numbers.
        fps: frame rate (integer).
        encoder: ``"auto"`` (h264_nvenc if its probe succeeds, else libx264), ``"libx264"`` or
            ``"h264_nvenc"``.
        preset, crf: libx264 settings (default superfast, 20).
        threads: libx264 threads (``None`` = ffmpeg's choice).
        queue_size: frames buffered between the caller and the pipe writer thread.
        ffmpeg: path to the ffmpeg binary (default :func:`ffmpeg_exe`).
        pipe_format: ``"yuv420p"`` (convert here, default) or ``"rgb24"`` (ffmpeg converts).
        audio: an audio file ffmpeg reads (e.g. a wav) to mux beside the video as AAC
            (:data:`AUDIO_CODEC_ARGS`), from time 0; ``None`` (default): a video-only mp4.

    After ``close()``: ``encoder`` (codec used), ``frames``, ``mux_ms`` (close: flush, the
    encoder's tail, faststart rewrite, rename), ``wait_ms`` (time ``write`` blocked because the
    encoder was behind), ``pipe_ms`` (writer thread time converting and writing to the pipe).

    Raises:
        BadInputError: output folder missing / not writable, bad size.
        EncoderError: no binary, ffmpeg failed or was killed (message has its stderr tail).
    """

    def __init__(
        self,
        path: Path | str,
        width: int,
        height: int,
        fps: int,
        *,
        encoder: str = "auto",
        preset: str = DEFAULT_PRESET,
        crf: int = DEFAULT_CRF,
        threads: int | None = None,
        queue_size: int = 4,
        ffmpeg: str | None = None,
        pipe_format: str = "yuv420p",
        audio: Path | str | None = None,
    ):
        self.path = check_output_folder(path)
        if width % 2 or height % 2 or width < 2 or height < 2:
            raise BadInputError(self.path, f"frame size {width}x{height} must be even (h264 yuv420p)")
        if pipe_format not in ("yuv420p", "rgb24"):
            raise NewsmotionError(f"pipe_format {pipe_format!r} is not 'yuv420p' or 'rgb24'")
        self.pipe_format = pipe_format
        if encoder not in ("auto", "libx264", "h264_nvenc"):
            raise NewsmotionError(f"encoder {encoder!r} is not 'auto', 'libx264' or 'h264_nvenc'")
        self.width, self.height, self.fps = int(width), int(height), int(fps)
        self.frames = 0
        self.mux_ms = 0.0
        self.wait_ms = 0.0
        self.pipe_ms = 0.0
        self._closed = False
        self._tmp_removed = False
        self._error: BaseException | None = None
        self._frame_bytes = self.width * self.height * 3
        self._tmp = self.path.with_name(f".{self.path.stem}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp.mp4")

        try:
            exe = ffmpeg or ffmpeg_exe()
        except NewsmotionError as exc:
            raise EncoderError(self.path, str(exc)) from None
        if not (os.path.isfile(exe) and os.access(exe, os.X_OK)) and shutil.which(exe) is None:
            raise EncoderError(self.path, f"ffmpeg binary {exe!r} not found or not executable")
        self.exe = exe
        if encoder == "auto":
            encoder = "h264_nvenc" if nvenc_available(exe) else "libx264"
        self.encoder = encoder
        if encoder == "h264_nvenc":
            codec_args: dict[str, Any] = {"vcodec": "h264_nvenc", "preset": "p4", "rc": "vbr", "cq": crf, "b:v": 0}
        else:
            codec_args = {"vcodec": "libx264", "preset": preset, "crf": crf}
            if threads:
                codec_args["threads"] = int(threads)
        video = ffmpeg_input(self.width, self.height, self.fps, pipe_format)
        mp4_args = {"f": "mp4", "pix_fmt": "yuv420p", "r": self.fps, "movflags": "+faststart", **codec_args}
        if audio is None:
            stream = video.output(str(self._tmp), an=None, **mp4_args)
        else:
            if not Path(audio).is_file():
                raise BadInputError(audio, "audio file to mux not found")
            stream = _with_audio(video, audio, self._tmp, mp4_args)
        stream = stream.global_args("-hide_banner", "-loglevel", "error", "-nostats").overwrite_output()
        self.command = stream.compile(cmd=exe)
        self._stderr = tempfile.TemporaryFile()
        try:
            # Its own process group: a terminal's SIGINT goes to Python only, which stops ffmpeg
            # (see the module docstring); ffmpeg never finalizes a clip on its own.
            self._proc = subprocess.Popen(
                self.command,
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=self._stderr,
                bufsize=0,
                process_group=0,
            )
        except OSError as exc:
            self._stderr.close()
            raise EncoderError(self.path, f"could not start ffmpeg {exe!r}: {exc}") from None
        # Runs at interpreter exit too (weakref.finalize's atexit hook): a second Ctrl-C that lands
        # while the first KeyboardInterrupt unwinds, before ``abort`` is reached, still leaves no
        # ffmpeg and no temporary file. It holds no reference to ``self``.
        self._finalizer = weakref.finalize(self, _kill_and_unlink, self._proc, self._tmp)
        self._queue: queue.Queue[np.ndarray | None] = queue.Queue(maxsize=max(1, queue_size))
        self._writer = threading.Thread(target=self._write_loop, name="newsmotion-encoder-pipe", daemon=True)
        self._writer.start()

    # -- the writer thread -----------------------------------------------------------------
    def _write_loop(self) -> None:
        stdin = self._proc.stdin
        assert stdin is not None
        while True:
            item = self._queue.get()
            if item is None:
                return
            if self._error is not None:
                continue  # keep draining so the producer never blocks on a dead pipe
            t0 = time.perf_counter()
            try:
                if self.pipe_format == "yuv420p":
                    item = cv2.cvtColor(item, cv2.COLOR_RGB2YUV_I420)
                _write_all(stdin, memoryview(item).cast("B"))
            except (OSError, ValueError) as exc:  # BrokenPipeError when ffmpeg died
                self._error = exc
            self.pipe_ms += (time.perf_counter() - t0) * 1e3

    # -- public API ------------------------------------------------------------------------
    def write(self, frame: np.ndarray) -> None:
        """Queue one uint8 RGB ``[height, width, 3]`` frame. Do not modify it afterwards (it is
        written from another thread)."""
        if self._closed:
            raise NewsmotionError(f"{self.path}: write after close")
        self._check_alive()
        if frame.shape != (self.height, self.width, 3) or frame.dtype != np.uint8:
            raise ValueError(
                f"frame is {frame.dtype} {frame.shape}; the encoder expects uint8 {(self.height, self.width, 3)}"
            )
        if not frame.flags.c_contiguous:
            frame = np.ascontiguousarray(frame)
        t0 = time.perf_counter()
        while True:
            try:
                self._queue.put(frame, timeout=0.5)
                break
            except queue.Full:
                self._check_alive()
        self.wait_ms += (time.perf_counter() - t0) * 1e3
        self.frames += 1

    def _check_alive(self) -> None:
        if self._error is not None or self._proc.poll() is not None:
            problem = self._describe_exit("ffmpeg stopped while frames were still coming")
            self.abort()
            raise EncoderError(self.path, problem)

    def _describe_exit(self, what: str) -> str:
        rc = self._proc.poll()
        if rc is None:
            how = "still running"
        elif rc < 0:
            how = f"killed by signal {-rc}"
        else:
            how = f"exit code {rc}"
        tail = _tail(self._stderr)
        return f"{what} ({self.encoder}, {how}){'; ffmpeg said: ' + tail if tail else ''}"

    def close(self) -> None:
        """Finish the file: flush frames, wait for ffmpeg, rename into place. Idempotent.

        Raises EncoderError (and removes the temporary file) if ffmpeg failed; an interrupt while
        finishing aborts (no file at ``path``, no temporary file) and propagates.
        """
        if self._closed:
            return
        try:
            self._finish()
        except BaseException:
            self.abort()
            raise

    def _finish(self) -> None:
        t0 = time.perf_counter()
        self._queue.put(None)
        self._writer.join()
        try:
            if self._proc.stdin:
                self._proc.stdin.close()
        except OSError as exc:  # BrokenPipeError flushing to a dead ffmpeg: reported below
            self._error = self._error or exc
        try:
            rc = self._proc.wait(timeout=120 + self.frames / 10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
            rc = None
        if rc != 0 or self._error is not None:
            problem = self._describe_exit("ffmpeg failed" if rc != 0 else f"writing to ffmpeg failed: {self._error}")
            self.abort()
            raise EncoderError(self.path, problem)
        if self.frames == 0:
            self.abort()
            raise EncoderError(self.path, "no frames were written")
        try:
            os.replace(self._tmp, self.path)
        except OSError as exc:
            self.abort()
            raise EncoderError(self.path, f"could not move the finished video into place: {exc}") from None
        self._tmp_removed = True  # renamed into place
        self._finalizer.detach()
        self._closed = True
        self._stderr.close()
        self.mux_ms = (time.perf_counter() - t0) * 1e3

    def abort(self) -> None:
        """Stop ffmpeg and delete the temporary file (nothing appears at ``path``).

        Idempotent and safe to re-enter: ffmpeg is killed and the temporary file removed before
        anything that waits, and the removal is repeated in ``finally``, so a second interrupt
        (Ctrl-C twice, a signal while waiting for ffmpeg to exit) cannot leave the file behind; an
        abort that never ran, or was cut short, is finished by the finalizer (at garbage collection
        or interpreter exit).
        """
        if self._closed and self._tmp_removed:
            return
        try:
            self._closed = True
            self._finalizer()  # SIGKILL ffmpeg (no trailer, no header-only file), unlink the temp file
            self._tmp_removed = True
            self._error = self._error or RuntimeError("aborted")
            self._proc.wait()
            # Unblock and finish the writer (its pending write fails on the closed pipe).
            try:
                if self._proc.stdin:
                    self._proc.stdin.close()
            except OSError:
                pass  # the pipe is already broken: nothing left to flush
            while True:
                try:
                    self._queue.put_nowait(None)
                    break
                except queue.Full:
                    try:
                        self._queue.get_nowait()
                    except queue.Empty:
                        pass
            self._writer.join(timeout=10)
        finally:
            self._remove_tmp()
            self._stderr.close()

    def _remove_tmp(self) -> None:
        self._tmp.unlink(missing_ok=True)
        self._tmp_removed = True

    @property
    def process(self) -> subprocess.Popen:
        """The ffmpeg process (for tests and diagnostics)."""
        return self._proc

    def __enter__(self) -> VideoEncoder:
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc_type is not None:
            self.abort()  # the frame source failed: no partial file; its exception propagates
            return False
        self.close()
        return False


def _kill_and_unlink(proc: subprocess.Popen, tmp: Path) -> None:
    """Stop ffmpeg outright and remove its temporary file, then reap ffmpeg (the encoder's
    finalizer; the file goes before the wait, so an interrupt during the wait leaves nothing)."""
    try:
        if proc.poll() is None:
            proc.kill()
    finally:
        tmp.unlink(missing_ok=True)
    proc.wait(timeout=30)


def ffmpeg_input(width: int, height: int, fps: int, pix_fmt: str = "rgb24"):
    """The ffmpeg-python input node for raw frames on stdin."""
    return ffmpeg.input("pipe:", format="rawvideo", pix_fmt=pix_fmt, s=f"{width}x{height}", framerate=fps)


def _with_audio(video: Any, audio: Path | str, path: Path, mp4_args: dict[str, Any]) -> Any:
    """The ffmpeg-python output node muxing ``video`` with the audio file's first audio stream."""
    return ffmpeg.output(video, ffmpeg.input(str(audio)).audio, str(path), **mp4_args, **AUDIO_CODEC_ARGS)


def _write_all(stream: Any, data: memoryview) -> None:
    """Write every byte to an unbuffered pipe (a raw write may be partial)."""
    while data:
        n = stream.write(data)
        if n is None:  # non-blocking pipe not ready; ours is blocking, so this is defensive
            continue
        data = data[n:]


_STREAM_RE = re.compile(r"Stream #\d+:\d+[^:]*: Video: (\w+)[^,]*, (\w+)[^,]*(?:\([^)]*\))?.*?, (\d+)x(\d+)")
_FPS_RE = re.compile(r"(\d+(?:\.\d+)?) fps")


def probe_video(path: Path | str, *, ffmpeg: str | None = None) -> dict[str, Any]:
    """Codec, size, frame count and frame rate of a video's first video stream.

    imageio-ffmpeg ships no ffprobe, so this reads ``ffmpeg -i`` (stream line) and counts frames
    by stream-copying the video to the null muxer (exact, no decoding).

    Returns:
        ``{"codec": "h264", "pix_fmt": "yuv420p", "width": 720, "height": 1280, "frames": 120,
        "fps": 30.0}``

    Raises:
        BadInputError: missing file or no readable video stream.
    """
    path = Path(path)
    if not path.is_file():
        raise BadInputError(path, "file not found")
    exe = ffmpeg or ffmpeg_exe()
    cmd = [exe, "-hide_banner", "-nostats", "-nostdin", "-i", str(path), "-map", "0:v:0", "-c", "copy",
           "-f", "null", "-progress", "pipe:1", "-"]  # fmt: skip
    res = subprocess.run(cmd, capture_output=True, timeout=120)
    err = res.stderr.decode("utf-8", "replace")
    m = _STREAM_RE.search(err)
    if res.returncode != 0 or m is None:
        tail = " | ".join(err.strip().splitlines()[-3:])
        raise BadInputError(path, f"not a readable video ({tail})")
    frames = re.findall(r"^frame=(\d+)", res.stdout.decode("utf-8", "replace"), flags=re.MULTILINE)
    line = err[m.start() : err.find("\n", m.start())]
    fps_m = _FPS_RE.search(line)
    return {
        "codec": m.group(1),
        "pix_fmt": m.group(2),
        "width": int(m.group(3)),
        "height": int(m.group(4)),
        "frames": int(frames[-1]) if frames else 0,
        "fps": float(fps_m.group(1)) if fps_m else 0.0,
    }
