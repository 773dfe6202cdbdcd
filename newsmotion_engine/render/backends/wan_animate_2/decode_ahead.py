"""Decode one segment while the next one denoises (``decode_overlap``).

With ``continuation="latent"`` the next segment needs only this segment's final latents, never
its pixels, so the VAE decode (3.8 s for an 81-frame 720x1280 segment on an H200) does not have
to sit between the two segments' denoising: :class:`BackgroundDecode` runs it in a worker thread
on its own CUDA stream, and the backend collects the frames after the next segment is
denoised. Same kernels on the same inputs, so the same frames (a test compares them); only the
order in which the GPU runs the work changes.

Off by default: on the 14B clip the H200 is already busy, the decode's kernels slipped in
between the denoiser's and the clip got slower (192.8 s vs 188.8 s, BENCHMARKS.md); it is for a
GPU with idle time. On the CPU the decode would compete with the denoising for the same cores, so
``auto`` uses it on CUDA devices only; ``on`` forces it (the thread without a stream), for tests.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np
import torch

from newsmotion_engine.render.backends.wan_animate_2 import denoise as D

__all__ = ["BackgroundDecode", "overlaps"]


def overlaps(setting: str, device: Any, continuation: str) -> bool:
    """Whether ``decode_overlap=setting`` runs decodes in the background on ``device``: never with
    ``continuation="pixel"`` (the next segment starts from this one's decoded frames)."""
    if setting == "off" or continuation != "latent":
        return False
    return setting == "on" or getattr(device, "type", "cpu") == "cuda"


class BackgroundDecode:
    """``decode_segment(vae, latents, frames)`` + the uint8 frames, started now in a worker
    thread (on a side stream that first waits for everything queued so far on the current one);
    :meth:`result` waits for it and re-raises whatever it raised (an OOM keeps its type, so the
    backend's memory message still applies)."""

    def __init__(self, vae: Any, latents: torch.Tensor, frames: int | None, device: Any) -> None:
        self._vae, self._latents, self._frames, self._device = vae, latents, frames, device
        self._stream = self._ready = None
        if getattr(device, "type", "cpu") == "cuda":
            self._stream = torch.cuda.Stream(device)
            self._ready = torch.cuda.Event()
            self._ready.record(torch.cuda.current_stream(device))
            # The latents came from the main stream: keep their memory from being reused there
            # while the side stream still reads them.
            latents.record_stream(self._stream)
        self._out: tuple[torch.Tensor, np.ndarray] | None = None
        self._error: BaseException | None = None
        self.decode_s = 0.0
        self._thread = threading.Thread(target=self._run, name="newsmotion-decode", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        t0 = time.perf_counter()
        try:
            with torch.no_grad():  # grad mode is per thread
                if self._stream is None:
                    video = D.decode_segment(self._vae, self._latents, self._frames)
                    self._out = (video, D.to_uint8_frames(video))
                else:
                    with torch.cuda.device(self._device), torch.cuda.stream(self._stream):
                        self._stream.wait_event(self._ready)
                        video = D.decode_segment(self._vae, self._latents, self._frames)
                        self._out = (video, D.to_uint8_frames(video))  # .cpu() waits for this stream only
                        self._stream.synchronize()
        except BaseException as exc:  # handed to the caller's thread by result()
            self._error = exc
        self.decode_s = time.perf_counter() - t0

    def wait(self) -> None:
        """Wait for the worker without taking its result (a render that stopped early)."""
        self._thread.join()

    def result(self) -> tuple[torch.Tensor, np.ndarray]:
        """``(video [1, 3, T, H, W] in [-1, 1], uint8 frames [T, H, W, 3])`` once decoded."""
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._out is not None
        video, frames = self._out
        if self._stream is not None:  # later work on the main stream may read the video
            torch.cuda.current_stream(self._device).wait_stream(self._stream)
        return video, frames
