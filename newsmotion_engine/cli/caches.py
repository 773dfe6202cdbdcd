"""``newsmotion caches``: what is cached, and whether it is current."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from newsmotion_engine.cli.console import console, human_bytes
from newsmotion_engine.storage import Storage


def cache_rows(store: Storage) -> list[dict[str, Any]]:
    """One row per cache (guidance, persona, then speech): id, kind, frames, bytes, created, status."""
    from newsmotion_engine import cachedir
    from newsmotion_engine.guidance.cache import all_loop_ids, guidance_status
    from newsmotion_engine.ids import SLUG_RE
    from newsmotion_engine.persona.cache import list_persona_ids, persona_status
    from newsmotion_engine.speech.cache import speech_status
    from newsmotion_engine.speech.sources import list_speech_ids

    def row(cache_id: str, kind: str, path: Path, status: str, cache: Any, detail: str,
            metadata: dict[str, Any] | None = None) -> dict[str, Any]:
        metadata = metadata if metadata is not None else (cache.metadata if cache else {})
        return {
            "id": cache_id,
            "kind": kind,
            "frames": getattr(cache, "frames", None),
            "bytes": cachedir.cache_bytes(path) if path.is_dir() else 0,
            "created": metadata.get("created_at"),
            "status": status,
            "detail": detail,
        }

    root = store.guidance_root
    on_disk = {p.name for p in root.iterdir() if p.is_dir() and SLUG_RE.match(p.name)} if root.is_dir() else set()
    rows = [
        row(loop_id, "guidance", store.guidance_dir(loop_id), *guidance_status(store, loop_id))
        for loop_id in sorted(set(all_loop_ids(store)) | on_disk)
    ]
    rows += [
        row(persona_id, "persona", store.persona_dir(persona_id), *persona_status(store, persona_id))
        for persona_id in list_persona_ids(store)
    ]
    for speech_id in list_speech_ids(store):
        status, cache, detail = speech_status(store, speech_id)
        rows.append(row(speech_id, "speech", store.speech_dir(speech_id), status, cache, detail, cache.meta if cache else {}))
    return rows


def print_cache_table(rows: list[dict[str, Any]]) -> None:
    table = Table("id", "kind", "frames", "bytes", "created", "status")
    colour = {"valid": "green", "stale": "yellow", "missing": "dim", "corrupt": "red", "invalid": "red"}
    for row in rows:
        status = f"[{colour.get(row['status'], 'white')}]{row['status']}[/]"
        if row["detail"]:
            status += f" ({row['detail']})"
        table.add_row(
            row["id"], row["kind"], str(row["frames"] or "-"), human_bytes(row["bytes"]), row["created"] or "-", status
        )
    console.print(table)


def caches(as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False) -> None:
    """What is cached: id, kind, frames, bytes, created, valid/stale/missing/corrupt."""
    rows = cache_rows(Storage.from_env())
    if as_json:
        sys.stdout.write(json.dumps(rows, indent=2) + "\n")
    else:
        print_cache_table(rows)
