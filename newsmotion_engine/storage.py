"""Where things live on disk: a :class:`Storage` rooted at one folder builds every path the
engine reads or writes. The engine receives a ``Storage`` explicitly; only the edges (the CLI,
the Dagster resources, the demo) decide the root, with :meth:`Storage.from_env` reading
``$NEWSMOTION_STORAGE`` (default ``./storage``).

Example::

    store = Storage.from_env()          # at an edge
    store.guidance_dir("nod")           # storage/motion/preprocessed/nod
    store.render_path("anna", "nod", "warp")
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from newsmotion_engine.errors import InvalidIdError
from newsmotion_engine.ids import validate_id

__all__ = ["STORAGE_ENV", "SPEECH_CLIPS", "SPEECH_FOLDERS", "SPEECH_INBOX", "SPEECH_SOURCES", "Storage", "validate_speech_id"]

STORAGE_ENV = "NEWSMOTION_STORAGE"
# Folders under speech/ beside the per-id caches.
SPEECH_INBOX = "inbox"
SPEECH_SOURCES = "sources"
# What audio-driven backends derive from audio that is no speech cache (a story's assembled
# speech), one folder per audio digest: speech/clips/{digest}/ (speech/features.py).
SPEECH_CLIPS = "clips"
SPEECH_FOLDERS = (SPEECH_INBOX, SPEECH_SOURCES, SPEECH_CLIPS)


def validate_speech_id(speech_id: str) -> str:
    """A speech id: a slug (:func:`validate_id`) that is not one of :data:`SPEECH_FOLDERS`."""
    validate_id(speech_id, "speech id")
    if speech_id in SPEECH_FOLDERS:
        raise InvalidIdError(f"invalid speech id {speech_id!r}: {', '.join(SPEECH_FOLDERS)} name folders under speech/")
    return speech_id


@dataclass(frozen=True)
class Storage:
    """The storage layout under ``root`` (see docs/ARCHITECTURE.md for the tree)."""

    root: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", Path(self.root).resolve())

    @classmethod
    def from_env(cls, default: str | Path = "storage") -> Storage:
        """The root named by ``$NEWSMOTION_STORAGE``, else ``default`` (relative to the working
        directory). Call this only at an edge of the program."""
        return cls(Path(os.environ.get(STORAGE_ENV) or default))

    # ---------------------------------------------------------------- motion (Tier 1)
    @property
    def motion_dir(self) -> Path:
        return self.root / "motion"

    @property
    def driving_dir(self) -> Path:
        """Drop ``{loop_id}.mp4`` (or .mov/.webm/.mkv/.avi) here to add a custom loop."""
        return self.motion_dir / "driving"

    @property
    def guidance_root(self) -> Path:
        return self.motion_dir / "preprocessed"

    def guidance_dir(self, loop_id: str) -> Path:
        return self.guidance_root / validate_id(loop_id, "loop id")

    # ---------------------------------------------------------------- appearance (Tier 2)
    @property
    def persona_root(self) -> Path:
        return self.motion_dir / "persona_caches"

    def persona_dir(self, persona_id: str) -> Path:
        return self.persona_root / validate_id(persona_id, "persona id")

    @property
    def persona_inbox(self) -> Path:
        """Drop a portrait here; the Dagster sensor ingests it."""
        return self.root / "personas" / "inbox"

    @property
    def persona_inbox_processed(self) -> Path:
        """Inbox portraits whose persona cache was built from them (moved out of the inbox, so the
        inbox shows what is still pending)."""
        return self.persona_inbox / "processed"

    @property
    def persona_inbox_rejected(self) -> Path:
        """Inbox files that cannot become a persona, each with a ``{name}.reason.txt`` beside it."""
        return self.persona_inbox / "rejected"

    @property
    def persona_samples(self) -> Path:
        return self.root / "personas" / "samples"

    @property
    def persona_sources(self) -> Path:
        """Each persona's source portrait, ``{persona_id}{suffix}``: what its cache is built from
        (kept so a persona can be rebuilt when newsmotion's normalization changes)."""
        return self.root / "personas" / "sources"

    @property
    def persona_previews(self) -> Path:
        """Preview sheets written by ``newsmotion persona show``."""
        return self.root / "personas" / "previews"

    @property
    def persona_rejected(self) -> Path:
        """Portraits that failed processing, each with a ``{name}.reason.txt`` beside it."""
        return self.root / "personas" / "rejected"

    def find_persona_source(self, persona_id: str) -> Path | None:
        folder = self.persona_sources
        validate_id(persona_id, "persona id")
        if not folder.is_dir():
            return None
        for path in sorted(folder.glob(f"{persona_id}.*")):
            if path.is_file() and path.stem == persona_id:
                return path
        return None

    # ---------------------------------------------------------------- speech
    @property
    def speech_root(self) -> Path:
        """``speech/``: one cache folder per speech id (``speech/{id}/``), beside ``inbox/``,
        ``sources/`` and ``clips/`` (names :data:`SPEECH_FOLDERS`, so never speech ids)."""
        return self.root / "speech"

    def speech_dir(self, speech_id: str) -> Path:
        return self.speech_root / validate_speech_id(speech_id)

    @property
    def speech_inbox(self) -> Path:
        """Drop a recording here (wav, mp3, m4a, flac, ogg); the Dagster sensor ingests it."""
        return self.speech_root / SPEECH_INBOX

    @property
    def speech_inbox_processed(self) -> Path:
        return self.speech_inbox / "processed"

    @property
    def speech_inbox_rejected(self) -> Path:
        """Inbox files that cannot become a speech, each with a ``{name}.reason.txt`` beside it."""
        return self.speech_inbox / "rejected"

    @property
    def speech_sources(self) -> Path:
        """Each speech's source, ``{speech_id}{suffix}``: the recording, or ``.tts`` (the text,
        voice and rate to speak): what its cache is built from."""
        return self.speech_root / SPEECH_SOURCES

    # ---------------------------------------------------------------- outputs
    @property
    def renders_root(self) -> Path:
        return self.motion_dir / "renders"

    def render_path(self, persona_id: str, loop_id: str, backend: str) -> Path:
        return (
            self.renders_root
            / validate_id(persona_id, "persona id")
            / validate_id(loop_id, "loop id")
            / f"{validate_id(backend, 'backend')}.mp4"
        )

    # ---------------------------------------------------------------- stories
    @property
    def stories_dir(self) -> Path:
        """Story files ``{story_id}.yaml`` (the Dagster story sensor watches it)."""
        return self.root / "stories"

    @property
    def story_renders_root(self) -> Path:
        return self.motion_dir / "stories"

    def story_render_path(self, persona_id: str, story_id: str, backend: str) -> Path:
        """``motion/stories/{persona}/{story}/{backend}.mp4`` (+ its story telemetry ``.json``)."""
        return (
            self.story_renders_root
            / validate_id(persona_id, "persona id")
            / validate_id(story_id, "story id")
            / f"{validate_id(backend, 'backend')}.mp4"
        )

    @property
    def ab_root(self) -> Path:
        return self.motion_dir / "ab"

    def ab_dir(self, persona_id: str, loop_id: str) -> Path:
        """``motion/ab/{persona}/{loop}/``: the two clips of an A/B comparison (``{label}.mp4`` +
        telemetry) and its per-frame record ``comparison.json``."""
        return self.ab_root / validate_id(persona_id, "persona id") / validate_id(loop_id, "loop id")

    @property
    def scorecards_dir(self) -> Path:
        return self.motion_dir / "scorecards"

    @property
    def bench_dir(self) -> Path:
        """Results of the scheduled benchmark runs, one result record per suite (the committed
        figures stay in the repository's ``benchmarks/results/``)."""
        return self.motion_dir / "bench"

    @property
    def bench_history_dir(self) -> Path:
        """Every scheduled benchmark run kept as ``{suite}/{UTC time}.json`` (the studio's trend
        chart); ``bench_dir`` holds only the latest."""
        return self.bench_dir / "history"

    @property
    def studio_dir(self) -> Path:
        """The studio: a static offline site (``newsmotion studio build``)."""
        return self.motion_dir / "studio"
