"""Sensors that grow the partitions: driving videos -> loops, inbox portraits -> personas.

Both are on by default, keep a cursor (see :mod:`newsmotion_assets.folder_watch`) and never raise on
what users drop: bad files are logged and skipped once; a file that only fails when processed
(e.g. a video with no person in it) fails its own run, not the sensor.
"""


import json
from pathlib import Path

import dagster as dg

from newsmotion_assets.assets.guidance import guidance_cache
from newsmotion_assets.assets.persona import persona_cache
from newsmotion_assets.folder_watch import scan_folder
from newsmotion_assets.partitions import loop_partitions, persona_partitions
from newsmotion_assets.resources import StorageResource
from newsmotion_engine.errors import BadInputError, InvalidIdError
from newsmotion_engine.guidance import palette
from newsmotion_engine.guidance.cache import VIDEO_SUFFIXES
from newsmotion_engine.ids import slugify, validate_id
from newsmotion_engine.persona.image import probe_portrait
from newsmotion_engine.persona.sources import PORTRAIT_SUFFIXES, install_source

MAX_DRIVING_VIDEO_BYTES = 2 * 2**30


def _loop_name_problem(path) -> str | None:
    try:
        validate_id(path.stem, "loop id")
    except InvalidIdError as exc:
        return f"file name cannot be a loop id: {exc}"
    if palette.is_canonical(path.stem):
        return f"{path.stem!r} is a canonical loop; rename the video to add a custom loop"
    return None


@dg.sensor(
    target=guidance_cache,
    default_status=dg.DefaultSensorStatus.RUNNING,
    minimum_interval_seconds=15,
    description="Adds the canonical loops and one loop per driving video in storage/motion/driving/, "
    "and requests their guidance caches.",
)
def loop_sensor(context: dg.SensorEvaluationContext, storage: StorageResource) -> dg.SensorResult:
    scan = scan_folder(
        storage.store.driving_dir,
        context.cursor,
        suffixes=VIDEO_SUFFIXES,
        max_bytes=MAX_DRIVING_VIDEO_BYTES,
        name_ok=_loop_name_problem,
    )
    for entry, problem in scan.skipped:
        context.log.warning(f"skipping {entry.path}: {problem}")
    for entry in scan.waiting:
        context.log.info(f"waiting for {entry.path} to finish copying ({entry.size} bytes so far)")

    known = set(context.instance.get_dynamic_partitions(loop_partitions.name))
    wanted = list(palette.LOOP_IDS) + [e.path.stem for e in scan.ready]
    new_ids = [loop_id for loop_id in dict.fromkeys(wanted) if loop_id not in known]
    requests = [
        # Run keys make each request once per content: canonical loops per palette version, driving
        # videos per (size, mtime) — a replaced video is extracted again.
        dg.RunRequest(partition_key=loop_id, run_key=f"canonical:{loop_id}:{palette.PALETTE_VERSION}")
        for loop_id in palette.LOOP_IDS
    ] + [
        dg.RunRequest(partition_key=e.path.stem, run_key=f"video:{e.path.name}:{e.size}:{e.mtime_ns}")
        for e in scan.ready
    ]
    return dg.SensorResult(
        run_requests=requests,
        dynamic_partitions_requests=[loop_partitions.build_add_request(new_ids)] if new_ids else [],
        cursor=scan.cursor,
    )


MAX_PORTRAIT_BYTES = 64 * 2**20


def _portrait_problem(path: Path) -> str | None:
    """Cheap checks from the file name and image header only (the sensor never decodes pixels)."""
    if slugify(path.stem) is None:
        return "file name has no letters or digits to make a persona id from; rename it"
    try:
        probe_portrait(path)
    except BadInputError as exc:
        return exc.problem
    return None


def _claim_id(stem: str, taken: set[str]) -> str:
    """Slug of ``stem``, suffixed -2, -3, ... when another portrait already owns it (never
    overwrite someone else's persona)."""
    base = slugify(stem) or "persona"
    candidate, n = base, 1
    while candidate in taken:
        n += 1
        candidate = f"{base[: 64 - len(str(n)) - 1]}-{n}"
    return candidate


@dg.sensor(
    target=persona_cache,
    default_status=dg.DefaultSensorStatus.RUNNING,
    minimum_interval_seconds=15,
    description="Turns each portrait dropped into storage/personas/inbox/ into a persona partition "
    "(id from the file name) and requests its cache.",
)
def persona_inbox_sensor(context: dg.SensorEvaluationContext, storage: StorageResource) -> dg.SensorResult:
    store = storage.store
    try:
        state = json.loads(context.cursor) if context.cursor else {}
    except ValueError:
        state = {}
    owners: dict[str, str] = state.get("ids", {})  # inbox file name -> persona id it became
    scan = scan_folder(
        store.persona_inbox,
        state.get("scan"),
        suffixes=PORTRAIT_SUFFIXES,
        max_bytes=MAX_PORTRAIT_BYTES,
        name_ok=_portrait_problem,
    )
    for entry, problem in scan.skipped:
        context.log.warning(f"skipping {entry.path}: {problem}")
    known = set(context.instance.get_dynamic_partitions(persona_partitions.name))
    taken = known | set(owners.values())
    new_ids, requests = [], []
    for entry in scan.ready:
        persona_id = owners.get(entry.path.name)
        if persona_id is None:
            persona_id = _claim_id(entry.path.stem, taken)
            taken.add(persona_id)
            owners[entry.path.name] = persona_id
        try:
            install_source(store, entry.path, persona_id)
        except OSError as exc:  # e.g. the file vanished mid-copy: report it; dropping it again retries
            context.log.warning(f"could not copy {entry.path}: {exc}")
            continue
        context.log.info(f"{entry.path.name} -> persona {persona_id!r}")
        if persona_id not in known:
            new_ids.append(persona_id)
        requests.append(
            dg.RunRequest(partition_key=persona_id, run_key=f"persona:{entry.path.name}:{entry.size}:{entry.mtime_ns}")
        )
    return dg.SensorResult(
        run_requests=requests,
        dynamic_partitions_requests=[persona_partitions.build_add_request(new_ids)] if new_ids else [],
        cursor=json.dumps({"scan": scan.cursor, "ids": owners}, sort_keys=True),
    )


# Evaluates the assets' automation conditions (render: eager), so a re-materialized guidance or
# persona cache re-renders its row/column of the grid. On by default, like the folder sensors.
render_automation_sensor = dg.AutomationConditionSensorDefinition(
    "render_automation_sensor",
    target=dg.AssetSelection.all(),
    default_status=dg.DefaultSensorStatus.RUNNING,
    minimum_interval_seconds=30,
    description="Declarative automation: re-renders when an upstream cache is re-materialized.",
)
