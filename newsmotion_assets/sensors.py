"""Sensors that grow the partitions: driving videos -> loops, portraits -> personas, recordings
and text -> speeches.

All are on by default, keep a cursor (see :mod:`newsmotion_assets.folder_watch`) and never raise on
what users drop: bad files are logged and skipped once; a file that only fails when processed
(e.g. a video with no person in it) fails its own run, not the sensor. The portrait inbox is kept
tidy, so it shows what is still pending: a portrait is taken in once it stayed unchanged for two
ticks and decodes, moves to ``inbox/processed/`` once its persona cache is built from it, and a
file that cannot become a persona moves to ``inbox/rejected/`` with ``{name}.reason.txt``. The
speech inbox (``speech/inbox/``) follows the same rules; a recording is checked as speech (the
loader's checks) before it is taken in.

What is on disk is the truth, whichever way it got there: every driving video in
``motion/driving/`` is a loop partition, every portrait in ``personas/sources/`` a persona
partition and every source in ``speech/sources/`` a speech partition, whether the sensor,
``newsmotion guidance extract``, ``persona add`` or ``speech add`` / ``say`` put it there; each gets its cache requested once per file content (run keys).
"""


import json
from pathlib import Path

import dagster as dg

from newsmotion_assets.assets.guidance import guidance_cache
from newsmotion_assets.assets.persona import persona_cache
from newsmotion_assets.assets.speech import speech_cache
from newsmotion_assets.assets.story import story
from newsmotion_assets.folder_watch import scan_folder
from newsmotion_assets.partitions import loop_partitions, persona_partitions, speech_partitions, story_partitions
from newsmotion_assets.resources import StorageResource
from newsmotion_engine.cachedir import load_status, sha256_file
from newsmotion_engine.errors import BadInputError, InvalidIdError
from newsmotion_engine.guidance.cache import VIDEO_SUFFIXES, load_guidance, loop_source
from newsmotion_engine.guidance.catalogue import LOOP_IDS, is_canonical
from newsmotion_engine.guidance.choreography import PALETTE_VERSION
from newsmotion_engine.ids import slugify, validate_id
from newsmotion_engine.persona.cache import current_params, image_source, load_persona
from newsmotion_engine.persona.image import probe_portrait, read_portrait
from newsmotion_engine.persona.sources import (
    PORTRAIT_SUFFIXES,
    REASON_SUFFIX,
    file_away,
    install_source,
    rejection_reason,
    source_persona_ids,
)
from newsmotion_engine.speech.audio import load_speech
from newsmotion_engine.speech.cache import source_record as speech_source_record
from newsmotion_engine.speech.cache import speech_status
from newsmotion_engine.speech.sources import AUDIO_SUFFIXES, find_source as find_speech_source
from newsmotion_engine.speech.sources import install_source as install_speech_source
from newsmotion_engine.speech.sources import source_speech_ids
from newsmotion_engine.storage import SPEECH_FOLDERS, Storage
from newsmotion_engine.story.format import MAX_STORY_BYTES, STORY_SUFFIXES, StoryError, load_story

MAX_DRIVING_VIDEO_BYTES = 2 * 2**30


def _loop_name_problem(path) -> str | None:
    try:
        validate_id(path.stem, "loop id")
    except InvalidIdError as exc:
        return f"file name cannot be a loop id: {exc}"
    if is_canonical(path.stem):
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
    # New or changed videos, and settled ones whose loop is not a partition (removed by hand, or
    # the instance is new): every video on disk ends up a loop.
    videos = {e.path.name: e for e in scan.ready}
    videos.update({e.path.name: e for e in scan.settled if e.path.stem not in known})
    wanted = list(LOOP_IDS) + [e.path.stem for e in videos.values()]
    new_ids = [loop_id for loop_id in dict.fromkeys(wanted) if loop_id not in known]
    materialized = context.instance.get_materialized_partitions(guidance_cache.key)
    requests = [
        # Run keys make each request once per content: canonical loops per palette version, driving
        # videos per (size, mtime) — a replaced video is extracted again. A canonical loop already
        # materialized with a current cache (by `make demo` in this instance) is not requested.
        dg.RunRequest(partition_key=loop_id, run_key=f"canonical:{loop_id}:{PALETTE_VERSION}")
        for loop_id in LOOP_IDS
        if not (loop_id in materialized and _guidance_current(storage.store, loop_id))
    ] + [
        dg.RunRequest(partition_key=e.path.stem, run_key=f"video:{e.path.name}:{e.size}:{e.mtime_ns}")
        for e in videos.values()
    ]
    return dg.SensorResult(
        run_requests=requests,
        dynamic_partitions_requests=[loop_partitions.build_add_request(new_ids)] if new_ids else [],
        cursor=scan.cursor,
    )


def _guidance_current(store: Storage, loop_id: str) -> bool:
    state, _, _ = load_status(lambda: load_guidance(store, loop_id, expected=loop_source(store, loop_id)))
    return state == "valid"


MAX_PORTRAIT_BYTES = 64 * 2**20


def _portrait_problem(path: Path) -> str | None:
    """Cheap checks from the file name and image header only (pixels are decoded once the file
    is stable, just before it is taken in)."""
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
    description="Copies each portrait dropped into storage/personas/inbox/ (once unchanged for two ticks "
    "and decodable) to personas/sources/ (id from the file name), then makes every portrait in "
    "personas/sources/ (from the inbox or `newsmotion persona add`) a persona partition and requests "
    "its cache once per content. Built portraits move to inbox/processed/, unusable files to "
    "inbox/rejected/ with a .reason.txt.",
)
def persona_inbox_sensor(context: dg.SensorEvaluationContext, storage: StorageResource) -> dg.SensorResult:
    store = storage.store
    return _inbox_tick(context, persona_partitions, persona_cache.key,
                       lambda state, known: _ingest_inbox(context, store, state, known), lambda: _source_files(store))


def _inbox_tick(context, partitions: dg.DynamicPartitionsDefinition, asset_key, ingest, sources) -> dg.SensorResult:
    """One tick of an inbox sensor: ``ingest(state, known)`` takes in the inbox (returns the inbox
    name -> id map and the scan cursor), then every file of ``sources()`` (id -> path) becomes a
    partition and gets its cache (``asset_key``) requested once per content."""
    try:
        state = json.loads(context.cursor) if context.cursor else {}
    except ValueError:
        state = {}
    known = set(context.instance.get_dynamic_partitions(partitions.name))
    owners, scan_cursor = ingest(state, known)
    handled = state.get("sources", {})  # source file name -> [size, mtime_ns] when last requested
    new_ids, requests, handled = _reconcile_sources(context, sources(), handled, known, asset_key)
    return dg.SensorResult(
        run_requests=requests,
        dynamic_partitions_requests=[partitions.build_add_request(new_ids)] if new_ids else [],
        cursor=json.dumps({"scan": scan_cursor, "ids": owners, "sources": handled}, sort_keys=True),
    )


# Ticks a dropped file must keep its size and mtime before it is taken in: one unchanged interval is
# not enough (a copy can stall longer than 15 s, e.g. from a network share).
INBOX_STABLE_SCANS = 2


def _ingest_inbox(context, store: Storage, state: dict, known: set[str]) -> tuple[dict[str, str], str]:
    """Copy settled inbox portraits into ``personas/sources/`` and tidy the inbox: a file that
    cannot become a persona goes to ``inbox/rejected/`` with its reason, a portrait whose persona
    cache was built from it goes to ``inbox/processed/``. Returns the inbox name -> persona id map
    and the scan cursor. Requests come from the sources (see ``_reconcile_sources``)."""
    owners: dict[str, str] = state.get("ids", {})  # inbox file name -> persona id it became
    scan = scan_folder(
        store.persona_inbox,
        state.get("scan"),
        suffixes=PORTRAIT_SUFFIXES,
        max_bytes=MAX_PORTRAIT_BYTES,
        name_ok=_portrait_problem,
        stable_scans=INBOX_STABLE_SCANS,
    )
    for entry, problem in scan.skipped:
        _reject_inbox_file(context, store, entry.path, problem)
    for entry in scan.waiting:
        context.log.info(f"waiting for {entry.path} to stay unchanged ({entry.size} bytes so far)")
    taken = known | set(owners.values()) | set(_source_files(store))
    ready = {e.path.name for e in scan.ready}
    for entry in scan.ready:
        rejected = _rejected_copy(store, entry.path)
        if rejected is not None:
            # Taking it in again would fail the same way; a different file under this name is new.
            reason = rejection_reason(rejected) or "see the folder"
            _reject_inbox_file(context, store, entry.path, f"this portrait was rejected before ({reason}; {rejected})")
            continue
        try:
            read_portrait(entry.path)  # decodes every pixel: a truncated file fails here, not in a run
        except BadInputError as exc:
            _reject_inbox_file(context, store, entry.path, exc.problem)
            continue
        _take_in(context, entry, owners, taken, slugify(entry.path.stem) or "persona", store.find_persona_source,
                 lambda path, persona_id: install_source(store, path, persona_id), "persona")
    for entry in scan.settled:
        persona_id = owners.get(entry.path.name)
        if entry.path.name in ready or persona_id is None or not entry.path.is_file():
            continue
        if _persona_built_from(store, persona_id, entry.path):
            moved = file_away(entry.path, store.persona_inbox_processed)
            context.log.info(f"{entry.path.name}: persona {persona_id!r} built from it; moved to {moved}")
        elif (rejected := _rejected_copy(store, entry.path)) is not None:
            reason = rejection_reason(rejected) or "see the folder"
            _reject_inbox_file(context, store, entry.path, f"{reason} (persona {persona_id!r}; {rejected})")
    return owners, scan.cursor


def _take_in(context, entry, owners: dict[str, str], taken: set[str], base: str, find, install, what: str) -> None:
    """Give a ready inbox file its id and copy it to the sources. The id is kept across ticks in
    ``owners``: the file name's slug ``base``, or ``base-2``, ``-3``, ... when another source owns
    it (never overwrite someone else's), or ``base`` itself when that source has the same content
    (a lost cursor, a file dropped twice). ``find(id)`` is an id's current source; an unchanged one
    is not copied again (that would only make its cache look new)."""
    source_id = owners.get(entry.path.name)
    if source_id is None:
        same = find(base)
        source_id = base if same is not None and _same_content(same, entry.path) else _claim_id(base, taken)
        taken.add(source_id)
        owners[entry.path.name] = source_id
    current = find(source_id)
    if current is not None and current.suffix == entry.path.suffix.lower() and _same_content(current, entry.path):
        return
    try:
        install(entry.path, source_id)
    except OSError as exc:  # e.g. the file vanished mid-copy: report it; dropping it again retries
        context.log.warning(f"could not copy {entry.path}: {exc}")
        return
    context.log.info(f"{entry.path.name} -> {what} {source_id!r}")


def _reject_inbox_file(context, store: Storage, path: Path, reason: str, folder: Path | None = None) -> None:
    """Move an inbox file to ``folder`` (default: the portrait inbox's ``rejected/``) with its reason."""
    try:
        moved = file_away(path, folder or store.persona_inbox_rejected, reason)
    except OSError as exc:  # e.g. it vanished meanwhile: it is out of the inbox either way
        context.log.warning(f"skipping {path}: {reason} (could not move it: {exc})")
        return
    context.log.warning(f"rejected {path.name}: {reason}; moved to {moved} (reason in {moved.name}{REASON_SUFFIX})")


def _persona_built_from(store: Storage, persona_id: str, path: Path) -> bool:
    """Whether ``persona_id``'s cache is current and was built from the portrait at ``path``."""
    state, _, _ = load_status(
        lambda: load_persona(store, persona_id, expected_source=image_source(path), expected_params=current_params(store, persona_id))
    )
    return state == "valid"


def _reconcile_sources(context, sources: dict[str, Path], handled: dict[str, list[int]], known: set[str], asset_key):
    """Every source file (id -> path: portraits, speeches) becomes a partition; the cache asset
    ``asset_key`` is requested when the file is new or replaced since the last tick, or was never
    materialized. Returns (new ids, requests, handled)."""
    materialized = context.instance.get_materialized_partitions(asset_key)
    new_ids, requests, now = [], [], {}
    for source_id, path in sources.items():
        try:
            stat = path.stat()
        except OSError:
            continue  # removed between listing and stat (e.g. just rejected)
        signature = [stat.st_size, stat.st_mtime_ns]
        now[path.name] = signature
        fresh = handled.get(path.name) != signature
        changed = fresh and path.name in handled
        if source_id not in known:
            new_ids.append(source_id)
        if changed or ((fresh or source_id in new_ids) and source_id not in materialized):
            requests.append(
                dg.RunRequest(partition_key=source_id, run_key=f"source:{path.name}:{stat.st_size}:{stat.st_mtime_ns}")
            )
    return new_ids, requests, now


def _source_files(store: Storage) -> dict[str, Path]:
    """persona id -> its source portrait, for every persona with one in ``personas/sources/``."""
    found = {}
    for persona_id in source_persona_ids(store):
        try:
            path = store.find_persona_source(persona_id)
        except InvalidIdError:
            continue  # a slug-shaped but reserved name ("con.png") put there by hand
        if path is not None:
            found[persona_id] = path
    return found


def _rejected_copy(store: Storage, path: Path) -> Path | None:
    """The portrait in ``personas/rejected/`` with the same content as ``path``, if any."""
    folder = store.persona_rejected
    if not folder.is_dir():
        return None
    for rejected in sorted(folder.iterdir()):
        if rejected.name.startswith(".") or rejected.name.endswith(REASON_SUFFIX) or not rejected.is_file():
            continue
        if _same_content(rejected, path):
            return rejected
    return None


def _same_content(a: Path, b: Path) -> bool:
    try:
        return a.stat().st_size == b.stat().st_size and sha256_file(a) == sha256_file(b)
    except OSError:
        return False


MAX_SPEECH_BYTES = 1 * 2**30


def _speech_name_problem(path: Path) -> str | None:
    if slugify(path.stem) is None:
        return "file name has no letters or digits to make a speech id from; rename it"
    return None


@dg.sensor(
    target=speech_cache,
    default_status=dg.DefaultSensorStatus.RUNNING,
    minimum_interval_seconds=15,
    description="Takes in each recording dropped into storage/speech/inbox/ (wav, mp3, m4a, flac, ogg; once "
    "unchanged for two ticks and decodable as usable speech) as storage/speech/sources/{id}.* (id from the file "
    "name), then makes every source in speech/sources/ (from the inbox or `newsmotion speech add` / `say`) a "
    "speech partition and requests its cache once per content. Built recordings move to inbox/processed/, "
    "unusable files to inbox/rejected/ with a .reason.txt.",
)
def speech_inbox_sensor(context: dg.SensorEvaluationContext, storage: StorageResource) -> dg.SensorResult:
    store = storage.store
    return _inbox_tick(
        context, speech_partitions, speech_cache.key, lambda state, known: _ingest_speech_inbox(context, store, state, known),
        lambda: {speech_id: path for speech_id in source_speech_ids(store) if (path := find_speech_source(store, speech_id))},
    )


def _ingest_speech_inbox(context, store: Storage, state: dict, known: set[str]) -> tuple[dict[str, str], str]:
    """Copy settled inbox recordings that load as usable speech (:func:`load_speech`'s checks:
    decodable, not silent, clipped, narrow-band or too long) into ``speech/sources/``; reject the
    rest with their reason; move a recording whose speech cache was built from it to
    ``inbox/processed/``. Returns the inbox name -> speech id map and the scan cursor."""
    owners: dict[str, str] = state.get("ids", {})  # inbox file name -> speech id it became
    scan = scan_folder(store.speech_inbox, state.get("scan"), suffixes=AUDIO_SUFFIXES, max_bytes=MAX_SPEECH_BYTES,
                       name_ok=_speech_name_problem, stable_scans=INBOX_STABLE_SCANS)
    rejected = store.speech_inbox_rejected
    for entry, problem in scan.skipped:
        _reject_inbox_file(context, store, entry.path, problem, rejected)
    for entry in scan.waiting:
        context.log.info(f"waiting for {entry.path} to stay unchanged ({entry.size} bytes so far)")
    taken = known | set(owners.values()) | set(source_speech_ids(store))
    ready = {e.path.name for e in scan.ready}
    for entry in scan.ready:
        try:
            load_speech(entry.path)  # decodes it all: a damaged or unusable file fails here, not in a run
        except BadInputError as exc:
            _reject_inbox_file(context, store, entry.path, exc.problem, rejected)
            continue
        base = slugify(entry.path.stem) or "speech"
        _take_in(context, entry, owners, taken, f"{base}-1" if base in SPEECH_FOLDERS else base,
                 lambda speech_id: find_speech_source(store, speech_id),
                 lambda path, speech_id: install_speech_source(store, path, speech_id), "speech")
    for entry in scan.settled:
        speech_id = owners.get(entry.path.name)
        if entry.path.name in ready or speech_id is None or not entry.path.is_file():
            continue
        state_now, cache, _ = speech_status(store, speech_id)
        if state_now == "valid" and cache.meta.get("source") == speech_source_record(entry.path):
            moved = file_away(entry.path, store.speech_inbox_processed)
            context.log.info(f"{entry.path.name}: speech {speech_id!r} built from it; moved to {moved}")
    return owners, scan.cursor


# Evaluates the assets' automation conditions (backend caches and render: eager once upstream
# checks pass), so a re-materialized guidance or persona cache rebuilds its backend cache and
# re-renders its row/column of the grid. On by default, like the folder sensors.
render_automation_sensor = dg.AutomationConditionSensorDefinition(
    "render_automation_sensor",
    target=dg.AssetSelection.all(),
    default_status=dg.DefaultSensorStatus.RUNNING,
    minimum_interval_seconds=30,
    # The render condition has a Python part (automation.RetryableFailureCondition), evaluated here.
    use_user_code_server=True,
    description="Declarative automation: builds backend caches and renders when an upstream cache is "
    "(re-)materialized and its blocking checks passed, and renders again after a failure trying again "
    "can fix (never after bad input).",
)


def _story_name_problem(path: Path) -> str | None:
    try:
        validate_id(path.stem, "story id")
    except InvalidIdError as exc:
        return f"file name cannot be a story id: {exc}"
    return None


@dg.sensor(
    target=story,
    default_status=dg.DefaultSensorStatus.RUNNING,
    minimum_interval_seconds=15,
    description="Makes every story file in storage/stories/ ({id}.yaml) a story partition and requests its "
    "render by the persona it names, once per file content; a file that is not a valid story is logged "
    "with its problem and skipped until it changes.",
)
def story_sensor(context: dg.SensorEvaluationContext, storage: StorageResource) -> dg.SensorResult:
    scan = scan_folder(storage.store.stories_dir, context.cursor, suffixes=STORY_SUFFIXES, max_bytes=MAX_STORY_BYTES,
                       name_ok=_story_name_problem)  # fmt: skip
    for entry, problem in scan.skipped:
        context.log.warning(f"skipping {entry.path}: {problem}")
    for entry in scan.waiting:
        context.log.info(f"waiting for {entry.path} to finish copying ({entry.size} bytes so far)")
    known = set(context.instance.get_dynamic_partitions(story_partitions.name))
    personas = set(context.instance.get_dynamic_partitions(persona_partitions.name))
    new_ids: list[str] = []
    requests = []
    # New or changed files, and settled ones whose story is not a partition (the instance is new).
    entries = {e.path.name: e for e in scan.settled if e.path.stem not in known}
    entries.update({e.path.name: e for e in scan.ready})
    for entry in entries.values():
        try:
            script = load_story(entry.path)
        except StoryError as exc:
            context.log.warning(f"skipping {exc}")
            continue
        if script.story_id not in known and script.story_id not in new_ids:
            new_ids.append(script.story_id)
        if script.persona_id not in personas:
            context.log.warning(f"{entry.path.name}: persona {script.persona_id!r} is not a persona partition yet; "
                                "add its portrait, then touch the story file")  # fmt: skip
            continue
        key = dg.MultiPartitionKey({"persona": script.persona_id, "story": script.story_id})
        if _materialized_since(context.instance, story.key, str(key), entry.mtime_ns / 1e9):
            continue  # rendered from this file already (by `make demo`, or an earlier run)
        requests.append(dg.RunRequest(partition_key=key, run_key=f"story:{entry.path.name}:{entry.size}:{entry.mtime_ns}"))
    return dg.SensorResult(
        run_requests=requests,
        dynamic_partitions_requests=[story_partitions.build_add_request(new_ids)] if new_ids else [],
        cursor=scan.cursor,
    )


def _materialized_since(instance: dg.DagsterInstance, asset_key: dg.AssetKey, partition: str, timestamp: float) -> bool:
    """Whether ``partition`` of ``asset_key`` was materialized after ``timestamp`` (seconds)."""
    records = instance.fetch_materializations(dg.AssetRecordsFilter(asset_key, asset_partitions=[partition], after_timestamp=timestamp),
                                              limit=1)  # fmt: skip
    return bool(records.records)
