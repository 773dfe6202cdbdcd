"""Keep mediapipe's native start-up chatter out of the user's terminal.

mediapipe 0.10.21 logs from C++ straight to file descriptor 2: TFLite's "Created TensorFlow Lite
XNNPACK delegate" INFO line, absl's "All log messages before absl::InitializeLog()" preamble and
one warning per model graph (nine "Feedback manager requires a model with a single signature"
lines for a holistic graph, a NORM_RECT projection warning). They interleave with the CLI's
progress bars and mean nothing to a user. Neither GLOG_minloglevel nor TF_CPP_MIN_LOG_LEVEL
reaches them (absl's C++ logging reads no environment variable; measured), and the Python
package exposes no log control, so :func:`filter_native_stderr` captures fd 2 around the native
calls and afterwards writes back every line that is not one of the known-harmless ones listed in
:data:`NOISE`. Anything else (a native error, a Python warning or traceback printed meanwhile,
output of another thread) is kept, only delayed until the block ends; an exception raised in
the block propagates after fd 2 is restored, so its traceback prints normally.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
import threading
from collections.abc import Iterator
from typing import Any

__all__ = ["NOISE", "filter_native_stderr", "is_noise"]

# Exactly the lines mediapipe's graphs print on a healthy start (absl lines: "W0000 00:00:<time>
# <thread> <file>:<line>] <message>"); a new kind of message is shown, not guessed away.
_ABSL = r"^[IW]\d{4} [\d:.]+\s+\d+ "  # severity, date, time, thread id
NOISE = (
    re.compile(r"^INFO: Created TensorFlow Lite XNNPACK delegate for CPU\.$"),
    re.compile(r"^WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR$"),
    re.compile(_ABSL + r"inference_feedback_manager\.cc:\d+\] Feedback manager requires a model"),
    re.compile(_ABSL + r"landmark_projection_calculator\.cc:\d+\] Using NORM_RECT without IMAGE_DIMENSIONS"),
)


def is_noise(line: str) -> bool:
    """Whether one stderr line is known-harmless mediapipe start-up output."""
    line = line.rstrip("\r\n")
    return any(p.search(line) for p in NOISE)


class _Capture:
    """fd 2 redirected into a temporary file, shared by overlapping users (threads, or detectors
    whose lifetimes interleave): the first one in redirects, the last one out restores fd 2 and
    writes back what is not noise. Restoring per user instead would hand fd 2 back to another
    user's (deleted) capture file when lifetimes do not nest."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.users = 0
        self.saved: int | None = None
        self.file: Any = None

    def enter(self) -> None:
        with self.lock:
            if self.users == 0:
                try:
                    saved = os.dup(2)
                except OSError:
                    saved = None  # no fd 2 to filter: a no-op
                if saved is not None:
                    with contextlib.suppress(Exception):
                        sys.stderr.flush()
                    self.file = tempfile.TemporaryFile()
                    os.dup2(self.file.fileno(), 2)
                self.saved = saved
            self.users += 1

    def exit(self) -> None:
        with self.lock:
            self.users -= 1
            if self.users or self.saved is None:
                return
            with contextlib.suppress(Exception):
                sys.stderr.flush()  # Python's buffered writes from the block belong to the capture
            os.dup2(self.saved, 2)
            os.close(self.saved)
            self.saved = None
            self.file.seek(0)
            text = self.file.read().decode("utf-8", "replace")
            self.file.close()
            self.file = None
        kept = [line for line in text.splitlines(True) if not is_noise(line)]
        if kept:
            sys.stderr.write("".join(kept))
            sys.stderr.flush()


_CAPTURE = _Capture()


@contextlib.contextmanager
def filter_native_stderr() -> Iterator[None]:
    """Capture fd 2 while the block runs; when the last overlapping block ends, re-emit every
    captured line that is not :data:`NOISE`. A no-op when fd 2 cannot be duplicated.

    mediapipe starts a graph's calculators on worker threads that log *after* the constructor
    returns, so the block must span the graph's whole life (creation to ``close()``), not single
    calls.

    Example::

        with filter_native_stderr():
            with mp.solutions.selfie_segmentation.SelfieSegmentation() as seg:
                result = seg.process(rgb)
    """
    _CAPTURE.enter()
    try:
        yield
    finally:
        _CAPTURE.exit()
