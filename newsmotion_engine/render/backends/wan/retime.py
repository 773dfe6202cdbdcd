"""Re-timing a generated loop to the frame count asked for (the Wan backends generate at the
model's 24 fps; a loop is usually 30 fps): :func:`retime_frames` blends the two neighbouring
generated frames, so nothing moves that the model did not paint."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

__all__ = ["retime_frames"]


def retime_frames(frames: Iterator[np.ndarray], n: int, T: int) -> Iterator[np.ndarray]:
    """``T`` frames from a seamless loop of ``n`` frames (``frames``, consumed once, in order):
    output ``j`` sits at ``j * n / T`` and blends its two neighbours linearly (past the last
    frame, towards frame 0). ``n == T`` passes the frames through. Holds three frames at most.

    Raises:
        RuntimeError: ``frames`` ended before ``n`` frames.
    """
    if n == T:
        yield from frames
        return
    src = iter(frames)
    kept: dict[int, np.ndarray] = {}
    count = 0

    def get(i: int) -> np.ndarray:
        nonlocal count
        while count <= i:
            try:
                kept[count] = next(src)
            except StopIteration:
                raise RuntimeError(f"retime: the backend emitted {count} frames, expected {n}") from None
            count += 1
            for old in [k for k in kept if 0 < k < count - 2]:
                del kept[old]
        return kept[i]

    for j in range(T):
        pos = j * n / T
        i0 = int(pos)
        w = pos - i0
        a = get(i0)
        if w < 1e-6:
            yield a
            continue
        b = get(0) if i0 + 1 >= n else get(i0 + 1)
        yield np.rint(a.astype(np.float32) * (1.0 - w) + b.astype(np.float32) * w).astype(np.uint8)
    for _ in src:  # let the backend's generator finish (it records last_render at its end)
        pass
