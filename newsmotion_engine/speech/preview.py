"""A picture of a speech for people: the waveform, the voice segments and the viseme channels over
time (with the TTS's phonemes when known), as PNG bytes. Drawn with matplotlib's object API (no
pyplot state), so it is safe inside Dagster runs and threads."""

from __future__ import annotations

import io

import numpy as np

from newsmotion_engine.speech.visemes import CHANNELS, VisemeTrack

__all__ = ["viseme_plot_png"]

_COLOURS = {"open": "#d62728", "wide": "#1f77b4", "round": "#2ca02c", "energy": "#7f7f7f"}


def viseme_plot_png(
    track: VisemeTrack,
    *,
    audio: np.ndarray | None = None,
    sample_rate: int = 16000,
    vad: list[tuple[float, float]] | None = None,
    phonemes=(),
    compare: VisemeTrack | None = None,
    title: str = "",
    width_in: float = 12.0,
) -> bytes:
    """PNG bytes: the waveform with the voice segments shaded (when ``audio`` is given), then one
    row per viseme channel; ``compare`` (e.g. the audio estimate of the same speech) is drawn
    dashed over ``track``; ``phonemes`` (objects with ``start_s`` and ``symbol``) label the top."""
    from matplotlib.figure import Figure

    rows = len(CHANNELS) + (1 if audio is not None else 0)
    fig = Figure(figsize=(width_in, 1.3 * rows + 0.6), dpi=80)
    axes = fig.subplots(rows, 1, sharex=True)
    frames = np.arange(len(track)) / track.fps
    row = 0
    if audio is not None:
        ax = axes[0]
        # The envelope (peak per 10 ms), not every sample: the same picture at a fraction of the cost.
        hop = max(1, sample_rate // 100)
        usable = len(audio) // hop * hop
        peaks = np.abs(np.asarray(audio[:usable], np.float32)).reshape(-1, hop).max(axis=1)
        times = np.arange(peaks.size) * hop / sample_rate
        ax.fill_between(times, -peaks, peaks, color="0.3", lw=0, zorder=3)
        for start, end in vad or []:
            ax.axvspan(start, end, color="#ffdd88", alpha=0.5, lw=0)
        ax.set_ylabel("audio\n(VAD shaded)", fontsize=8)
        ax.set_ylim(-1, 1)
        row = 1
    for name in CHANNELS:
        ax = axes[row]
        ax.plot(frames, getattr(track, name), color=_COLOURS[name], lw=1.4, label="phonemes" if compare else None)
        if compare is not None:
            ax.plot(np.arange(len(compare)) / compare.fps, getattr(compare, name), color=_COLOURS[name], lw=1.0,
                    ls="--", alpha=0.8, label="audio")
        ax.set_ylim(0, 1.02)
        ax.set_ylabel(name, fontsize=8)
        row += 1
    top = axes[1 if audio is not None else 0]
    for ph in phonemes:
        top.text(ph.start_s, 0.98, ph.symbol, fontsize=6, va="top", color="0.35")
    if compare is not None:
        top.legend(loc="upper right", fontsize=7)
    axes[-1].set_xlabel(f"seconds ({track.fps:g} fps)")
    if title:
        fig.suptitle(title, fontsize=10)
    fig.subplots_adjust(left=0.07, right=0.99, bottom=0.08, top=0.93 if title else 0.98, hspace=0.15)
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()
