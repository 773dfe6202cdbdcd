"""``newsmotion speech``: speech caches from recordings or from text spoken by the built-in TTS."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from newsmotion_engine.cli.console import console, progress_bar
from newsmotion_engine.storage import Storage

speech_app = typer.Typer(help="Speech: recordings or text to speak -> audio, voice activity and mouth shapes.",
                         no_args_is_help=True)

FPS_HELP = "Video frame rate of the viseme track."


@speech_app.command("add")
def speech_add(
    audio: Annotated[Path, typer.Argument(help="Recording: wav, mp3, m4a, flac or ogg (16 kHz or more; stereo is downmixed).")],
    speech_id: Annotated[str, typer.Option("--id", help="Speech id (a slug).")],
    force: Annotated[bool, typer.Option("--force", help="Rebuild, or replace a speech made from another source.")] = False,
    fps: Annotated[float, typer.Option("--fps", help=FPS_HELP, min=1.0, max=240.0)] = 30.0,
) -> None:
    """Decode a recording once: 16 kHz loudness-normalised audio, voice segments, mouth shapes estimated from the audio."""
    _add(audio, speech_id, force=force, fps=fps)


@speech_app.command("say")
def speech_say(
    text: Annotated[str, typer.Argument(help="The words to speak.")],
    speech_id: Annotated[str, typer.Option("--id", help="Speech id (a slug).")],
    voice: Annotated[str, typer.Option("--voice", help="eSpeak NG voice (`newsmotion speech voices`).")] = "en-us",
    words_per_minute: Annotated[int, typer.Option("--wpm", help="Speaking rate, words per minute (80-450).")] = 165,
    force: Annotated[bool, typer.Option("--force", help="Rebuild, or replace a speech made from another source.")] = False,
    fps: Annotated[float, typer.Option("--fps", help=FPS_HELP, min=1.0, max=240.0)] = 30.0,
) -> None:
    """Speak text with the offline TTS (eSpeak NG) and cache it, mouth shapes from its phoneme timings."""
    from newsmotion_engine.speech.tts import TextSpeech

    _add(TextSpeech(text, voice, words_per_minute).check(), speech_id, force=force, fps=fps)


def _add(source, speech_id: str, *, force: bool, fps: float) -> None:
    from newsmotion_engine.speech.sources import add_speech

    store = Storage.from_env()
    with progress_bar() as bar:
        bar.add_task(f"speech {speech_id}", total=None)
        cache, built = add_speech(store, source, speech_id, force=force, fps=fps)
    meta = cache.meta
    console.print(
        f"speech [bold]{speech_id}[/]: {'built' if built else 'current, reused'}; {cache.duration_s:.2f} s, "
        f"{len(cache.vad)} voice segment(s) ({meta.get('speech_s', 0):.2f} s voiced), {len(cache.visemes)} viseme "
        f"frames at {cache.fps:g} fps from {meta.get('viseme_source')} -> {cache.path}"
    )


@speech_app.command("list")
def speech_list() -> None:
    """List speeches: source, duration, voice segments, viseme frames and cache status."""
    from newsmotion_engine.speech.cache import speech_status
    from newsmotion_engine.speech.sources import list_speech_ids

    store = Storage.from_env()
    table = Table("speech", "source", "duration", "voiced", "visemes", "created", "status")
    for speech_id in list_speech_ids(store):
        status, cache, detail = speech_status(store, speech_id)
        meta = cache.meta if cache else {}
        if meta.get("source_type") == "tts":
            source = f"tts {meta.get('voice')} {meta.get('words_per_minute')} wpm: {_short(meta.get('text', ''))}"
        else:
            source = meta.get("source_name", "-")
        table.add_row(
            speech_id,
            source,
            f"{cache.duration_s:.2f} s" if cache else "-",
            f"{meta.get('speech_s', 0):.2f} s in {len(cache.vad)}" if cache else "-",
            f"{len(cache.visemes)} @ {cache.fps:g} fps ({meta.get('viseme_source')})" if cache else "-",
            meta.get("created_at", "-"),
            status + (f" ({detail})" if detail else ""),
        )
    console.print(table)


@speech_app.command("voices")
def speech_voices() -> None:
    """The TTS voices `speech say --voice` accepts."""
    from newsmotion_engine.speech.tts import DEFAULT_VOICE, VOICES

    for voice in VOICES:
        console.print(voice + (" (default)" if voice == DEFAULT_VOICE else ""))


def _short(text: str, width: int = 40) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"
