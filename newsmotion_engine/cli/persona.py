"""``newsmotion persona``: Tier-2 persona appearance caches."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import click
import typer
from rich.table import Table

from newsmotion_engine.cli.console import console, progress_bar, selected_ids
from newsmotion_engine.storage import Storage


persona_app = typer.Typer(help="Tier-2 persona appearance caches.", no_args_is_help=True)


FRAMING_HELP = (
    "medium (default: head top at 10% of the frame, shoulders centred, down to the photo's cut), "
    "wide (the photo's whole width) or as-is (fit, bottom-centre); default: the persona's current framing"
)


@persona_app.command("add")
def persona_add(
    image: Annotated[Path, typer.Argument(help="Portrait: jpg, png or webp (waist-up, ideally on chroma green).")],
    persona_id: Annotated[str, typer.Option("--id", help="Persona id (a slug).")],
    force: Annotated[bool, typer.Option("--force", help="Rebuild, or replace a persona made from another portrait.")] = False,
    framing: Annotated[Optional[str], typer.Option("--framing", help=FRAMING_HELP)] = None,
) -> None:
    """Normalize a portrait once: framing, matte, face mask, landmarks -> a memory-mappable persona cache."""
    from newsmotion_engine.persona.sources import add_persona

    store = Storage.from_env()
    check_framing(framing)
    with progress_bar() as bar:
        task = bar.add_task(f"persona {persona_id}", total=None)
        cache, rebuilt = add_persona(
            store, image, persona_id, force=force, framing=framing,
            progress=lambda d, t: bar.update(task, completed=d, total=t),
        )
    console.print(
        f"persona [bold]{persona_id}[/]: {'built' if rebuilt else 'current, reused'}; matte {cache.matte_method}; "
        f"visible {', '.join(cache.visible_parts)} -> {cache.path}"
    )
    for note in photo_notes(cache.metadata):
        console.print(f"  {note}")


def check_framing(framing: str | None) -> None:
    from newsmotion_engine.persona.image import FRAMINGS

    if framing is not None and framing not in FRAMINGS:
        raise click.BadParameter(f"{framing!r} is not one of {', '.join(FRAMINGS)}", param_hint="--framing")


def photo_notes(metadata: dict[str, Any]) -> list[str]:
    """What a persona build did about its photo, for people: the orientation fix and the points
    outside the photo (stored as not visible). ``[]`` for an upright photo showing every point."""
    from newsmotion_engine.persona.landmarks import describe_turns

    notes = []
    turns = int((metadata.get("source_image") or {}).get("upright_rotation_ccw", 0)) // 90
    if turns:
        notes.append(f"the photo was {describe_turns(turns)}: turned upright")
    if metadata.get("out_of_view"):
        notes.append(f"outside the photo (not visible): {', '.join(metadata['out_of_view'])}")
    framing = metadata.get("framing") or {}
    if framing.get("limited_by") == "upscale":
        notes.append(
            f"framing {framing.get('mode')}: the photo is too small to put the head at the headroom line "
            f"without enlarging it past the limit; head top at {framing.get('headroom', 0):.0%} of the frame"
        )
    return notes


@persona_app.command("build")
def persona_build(
    personas: Annotated[Optional[list[str]], typer.Argument(help="Persona ids (default with --all: every kept portrait).")] = None,
    all_personas: Annotated[bool, typer.Option("--all", help="Build every persona with a kept source portrait.")] = False,
    force: Annotated[bool, typer.Option("--force", help="Rebuild even when the cache is current.")] = False,
    framing: Annotated[Optional[str], typer.Option("--framing", help=FRAMING_HELP)] = None,
) -> None:
    """Build (or reuse when current) persona caches from their kept portraits in personas/sources/."""
    from newsmotion_engine.persona.build import ensure_persona
    from newsmotion_engine.persona.cache import persona_source_image
    from newsmotion_engine.persona.sources import source_persona_ids

    store = Storage.from_env()
    check_framing(framing)
    ids = selected_ids(
        "persona", personas, all_personas, lambda: source_persona_ids(store), lambda i: persona_source_image(store, i)
    )
    table = Table("persona", "matte", "visible parts", "photo", "action")
    with progress_bar() as bar:
        for persona_id in ids:
            task = bar.add_task(f"persona {persona_id}", total=None)
            cache, built = ensure_persona(
                store, persona_id, force=force, framing=framing,
                progress=lambda d, t, task=task: bar.update(task, completed=d, total=t),
            )
            bar.update(task, visible=False)
            table.add_row(
                persona_id,
                cache.matte_method,
                ", ".join(cache.visible_parts),
                "; ".join(photo_notes(cache.metadata)) or "-",
                "built" if built else "current",
            )
    console.print(table)


@persona_app.command("list")
def persona_list() -> None:
    """List persona caches with their matte method, visible parts and status."""
    from newsmotion_engine.persona.cache import list_persona_ids, persona_status

    store = Storage.from_env()
    table = Table("persona", "matte", "visible parts", "created", "status")
    for persona_id in list_persona_ids(store):
        status, cache, detail = persona_status(store, persona_id)
        table.add_row(
            persona_id,
            cache.matte_method if cache else "-",
            ", ".join(cache.visible_parts) if cache else "-",
            cache.metadata.get("created_at", "-") if cache else "-",
            status + (f" ({detail})" if detail else ""),
        )
    console.print(table)


@persona_app.command("show")
def persona_show(
    persona_id: Annotated[str, typer.Argument(help="Persona id.")],
    out: Annotated[Optional[Path], typer.Option("--out", help="Preview PNG path (default storage/personas/previews/ID.png).")] = None,
) -> None:
    """Write a preview PNG (portrait, matte, face mask, landmarks) and print the persona's facts."""
    from newsmotion_engine.persona.cache import load_persona
    from newsmotion_engine.persona.landmarks import describe_turns
    from newsmotion_engine.persona.preview import write_preview

    store = Storage.from_env()
    cache = load_persona(store, persona_id)
    out = out or store.persona_previews / f"{persona_id}.png"
    write_preview(cache, out)
    meta = cache.metadata
    table = Table("field", "value")
    table.add_row("matte", cache.matte_method)
    table.add_row("visible parts", ", ".join(cache.visible_parts))
    table.add_row("coverage", ", ".join(f"{k} {v:.1%}" for k, v in meta.get("coverage", {}).items()))
    table.add_row("source size", str(meta.get("source_size")))
    framing = meta.get("framing") or {}
    table.add_row("framing", f"{framing.get('mode', '-')} (scale {framing.get('scale', '-')}, head top at "
                  f"{framing.get('headroom') if framing.get('headroom') is not None else '-'} of the height"
                  + (", limited by the upscale limit" if framing.get("limited_by") else "") + ")")
    table.add_row("orientation", describe_turns(int((meta.get("source_image") or {}).get("upright_rotation_ccw", 0)) // 90))
    table.add_row("outside the photo", ", ".join(meta.get("out_of_view") or []) or "-")
    table.add_row("created", str(meta.get("created_at")))
    console.print(table)
    console.print(f"preview -> {out}")
