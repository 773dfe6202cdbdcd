"""Build the studio: a static, offline site under ``storage/motion/studio/``.

Pages (plain HTML + CSS + vanilla JS, every file local, usable from ``file://`` or
``newsmotion studio serve``):

- ``index.html``: persona x loop grid, one card per render with its thumbnail and badges;
- ``render/{persona}/{loop}/{backend}.html``: the clip, the guidance skeleton over it (toggle,
  drawn on a canvas from the followed keypoints in the style of ``guidance/draw.py``), telemetry;
- ``ab/{persona}/{loop}/{a}.vs.{b}.html``: every pair of playable renders of one persona x loop:
  synced playback with a draggable wipe, the |A-B| heatmap clip, per-frame PSNR / SSIM / pose
  error plots, both telemetry records side by side;
- ``scorecard.html``: the charts of :mod:`newsmotion_engine.studio.charts`;
- stories (``motion/stories/``): played with their sound on the index page.

The site is written into a temporary sibling folder and swapped into place at the end, so a
reader never sees half a site. Clips are hard-linked into ``media/`` (copied where links are not
possible): the site is self-contained. Comparisons are reused from the previous site while both
clips are unchanged (:func:`~newsmotion_engine.studio.compare.comparison_key`). A render whose clip
is missing, truncated or unreadable gets a page saying so; it never fails the build.

Example::

    report = build_studio(Storage.from_env())
    report.index, report.renders, report.comparisons
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import cv2
import jinja2
import numpy as np

from newsmotion_engine.cachedir import cache_lock
from newsmotion_engine.errors import NewsmotionError
from newsmotion_engine.guidance.draw import pose_style
from newsmotion_engine.render.lipsync import SILENT_REASON
from newsmotion_engine.render.telemetry import RenderTelemetry, cell_text
from newsmotion_engine.storage import Storage
from newsmotion_engine.story.telemetry import StoryTelemetry, StoryTelemetryError
from newsmotion_engine.studio import charts as C
from newsmotion_engine.studio.catalog import RenderEntry, group_by_pair, scan_renders
from newsmotion_engine.studio.paths import ab_page, pair_dir, render_page
from newsmotion_engine.studio.compare import HEATMAP_NAME, Comparison, compare_clips, comparison_key
from newsmotion_engine.studio.pose import PoseTracker, followed_keypoints
from newsmotion_engine.videoio import iter_frames

__all__ = ["StudioReport", "build_studio", "badges", "telemetry_rows"]

_HERE = Path(__file__).parent
THUMB_WIDTH = 240
Log = Callable[[str], None]


@dataclass(frozen=True)
class StudioReport:
    """What a build wrote: the site's ``root`` and ``index``, page counts, the renders with
    problems (``"persona/loop/backend: problem"``), and each page by render key / pair key."""

    root: Path
    index: Path
    renders: int
    comparisons: int
    reused_comparisons: int
    stories: int = 0
    problems: list[str] = field(default_factory=list)
    render_pages: dict[str, str] = field(default_factory=dict)
    ab_pages: dict[str, str] = field(default_factory=dict)


def _env() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(_HERE / "templates")),
        autoescape=jinja2.select_autoescape(["html"]),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["cell"] = cell_text
    env.filters["data_json"] = _data_json
    return env


def _data_json(value: Any) -> str:
    # Inline <script type="application/json">: "</" must not end the element early.
    return jinja2.utils.markupsafe.Markup(json.dumps(value, separators=(",", ":")).replace("</", "<\\/"))


def _link_or_copy(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def _flatten(value: Any, prefix: str = "") -> list[tuple[str, str]]:
    if isinstance(value, dict):
        rows: list[tuple[str, str]] = []
        for key in value:
            rows.extend(_flatten(value[key], f"{prefix}{key}."))
        return rows
    if isinstance(value, list):
        return [(prefix[:-1], json.dumps(value))]
    return [(prefix[:-1], cell_text(value))]


def telemetry_rows(tele: RenderTelemetry | None) -> list[tuple[str, str]]:
    """The whole record as (field path, text) rows: the table a render page shows."""
    return _flatten(tele.to_dict()) if tele is not None else []


def badges(entry: RenderEntry) -> list[dict[str, str]]:
    """The card badges of a render: ``[{text, kind, title}]`` (kind: a CSS modifier)."""
    out = [{"text": entry.backend, "kind": "backend", "title": "render backend"}]
    if entry.clip_state != "ok":
        out.append({"text": f"clip {entry.clip_state}", "kind": "bad", "title": "; ".join(entry.problems)})
    tele = entry.telemetry
    if tele is None:
        out.append({"text": "no telemetry", "kind": "bad", "title": "; ".join(entry.problems)})
        return out
    row = tele.row(RenderTelemetry.BADGES)
    weights = row["weights"] or "weights unknown"
    out.append({"text": "no weights" if weights == "none" else weights, "kind": "warn" if "random" in weights else "plain", "title": "weights"})
    fps = row["fps_achieved"]
    if fps is not None and fps >= 1:
        out.append({"text": f"{fps:.0f} fps", "kind": "plain", "title": f"{tele.frames} frames in {tele.wall_s:.2f} s, encode included"})
    else:
        out.append({"text": f"{row['wall_s']:.1f} s", "kind": "plain", "title": f"{tele.frames} frames, wall time"})
    vram = row["peak_vram_gib"]
    out.append({"text": f"VRAM {vram:.1f} GiB" if vram is not None else "VRAM -", "kind": "plain" if vram is not None else "muted",
                "title": "peak GPU memory" if vram is not None else "no GPU memory measured (CPU backend)"})  # fmt: skip
    hit = row["guidance_cache"] == "hit" and row["persona_cache"] == "hit"
    out.append({"text": "cache hit" if hit else "cache built", "kind": "good" if hit else "plain",
                "title": f"guidance cache: {row['guidance_cache']}, persona cache: {row['persona_cache']}"})  # fmt: skip
    if row["pose_fidelity_pck"] is not None:
        out.append({"text": f"PCK {row['pose_fidelity_pck']:.2f}", "kind": "plain", "title": "pose fidelity, PCK@0.05"})
    if tele.lip_sync is not None and row["lip_sync_correlation"] is not None:
        ls = tele.lip_sync
        out.append({"text": f"lips r {ls.correlation:.2f} · {ls.offset_frames:+d} f", "kind": "good" if ls.meets_targets else "warn",
                    "title": f"lip sync: mouth aperture vs the speech's {ls.reference} track, correlation at the best "
                             f"lag and the audio-video offset in frames (targets r >= {ls.targets['correlation']}, "
                             f"|offset| <= {ls.targets['offset_frames']})"})  # fmt: skip
    elif tele.lip_sync_reason and not tele.lip_sync_reason.startswith((SILENT_REASON, "recorded by telemetry schema")):
        # Rendered with speech but not scored (no mediapipe on that machine, no face found...).
        out.append({"text": "lips -", "kind": "muted", "title": f"lip sync not measured: {tele.lip_sync_reason}"})
    return out


def _meta(entry: RenderEntry) -> str:
    """``288×512 · 4.0 s``: the clip's size and length (the telemetry's when the clip is gone)."""
    tele = entry.telemetry
    width, height = entry.width or (tele.width if tele else None), entry.height or (tele.height if tele else None)
    frames, fps = entry.frames, entry.fps or (tele.fps if tele else None)
    parts = [f"{width}×{height}" if width and height else "size unknown"]
    if frames:
        parts.append(f"{frames / fps:.1f} s" if fps else f"{frames} frames")
    return " · ".join(parts)


def _thumbnail(entry: RenderEntry, dst: Path) -> bool:
    """The clip's middle frame (or its last decodable one), ``THUMB_WIDTH`` wide, as JPEG."""
    target = max(0, (entry.frames_on_disk or entry.frames or 1) // 2)
    frame = None
    try:
        for i, rgb in enumerate(iter_frames(entry.mp4)):
            frame = rgb
            if i >= target:
                break
    except NewsmotionError:
        return False
    if frame is None:
        return False
    h, w = frame.shape[:2]
    small = cv2.resize(frame, (THUMB_WIDTH, max(1, round(h * THUMB_WIDTH / w))), interpolation=cv2.INTER_AREA)
    dst.parent.mkdir(parents=True, exist_ok=True)
    return bool(cv2.imwrite(str(dst), cv2.cvtColor(small, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_JPEG_QUALITY, 85]))


def _keypoint_frames(kp: np.ndarray, conf: float) -> list[list[float]]:
    """Compact overlay data: per frame a flat [x, y, c] * 133 list, unconfident points zeroed."""
    kp = np.asarray(kp, dtype=np.float32).copy()
    kp[kp[..., 2] < conf] = 0.0
    kp[..., :2] = np.round(kp[..., :2], 4)
    kp[..., 2] = np.round(kp[..., 2], 2)
    return [frame.reshape(-1).tolist() for frame in kp]


def _story_cards(storage: Storage, tmp: Path) -> list[dict[str, Any]]:
    """Every story mp4 (``motion/stories/{persona}/{story}/{backend}.mp4``) linked into
    ``media/stories/``, with what its record says (played with sound on the index page)."""
    root = storage.story_renders_root
    cards = []
    for mp4 in sorted(root.glob("*/*/*.mp4")) if root.is_dir() else []:
        rel = mp4.relative_to(root).as_posix()
        _link_or_copy(mp4, tmp / "media" / "stories" / rel)
        try:
            tele, note = StoryTelemetry.read(mp4.with_suffix(".json")), None
        except StoryTelemetryError as exc:
            tele, note = None, exc.problem
        cards.append({"video": f"media/stories/{rel}", "persona": mp4.parts[-3], "story": mp4.parts[-2], "backend": mp4.stem,
                      "tele": tele, "note": note})  # fmt: skip
    return cards


class _Builder:
    def __init__(self, storage: Storage, tmp: Path, old: Path, bench_results: Path, pose: bool, log: Log):
        self.storage, self.tmp, self.old, self.bench_results = storage, tmp, old, bench_results
        self.pose, self.log = pose, log
        self.env = _env()
        self.built_at = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        self._followed: dict[tuple[str, str], tuple[np.ndarray | None, str | None]] = {}
        self.reused = 0

    def write(self, rel: str, template: str, **context: Any) -> None:
        path = self.tmp / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        depth = rel.count("/")
        html = self.env.get_template(template).render(root="../" * depth, built_at=self.built_at, **context)
        path.write_text(html, encoding="utf-8")

    def followed(self, persona_id: str, loop_id: str) -> tuple[np.ndarray | None, str | None]:
        key = (persona_id, loop_id)
        if key not in self._followed:
            self._followed[key] = followed_keypoints(self.storage, persona_id, loop_id)
        return self._followed[key]

    def media(self, entry: RenderEntry) -> dict[str, Any]:
        """Link the clip, make the thumbnail; the card's view of the render."""
        base = f"{entry.persona_id}/{entry.loop_id}/{entry.backend}"
        video = thumb = None
        if entry.playable:
            _link_or_copy(entry.mp4, self.tmp / "media" / f"{base}.mp4")
            video = f"media/{base}.mp4"
        if entry.clip_state in ("ok", "truncated") and _thumbnail(entry, self.tmp / "thumbs" / f"{base}.jpg"):
            thumb = f"thumbs/{base}.jpg"
        return {"entry": entry, "video": video, "thumb": thumb, "badges": badges(entry), "meta": _meta(entry),
                "page": render_page(entry.persona_id, entry.loop_id, entry.backend)}  # fmt: skip

    def comparison(self, a: RenderEntry, b: RenderEntry) -> tuple[Comparison | None, str | None]:
        rel = pair_dir(a.persona_id, a.loop_id, a.backend, b.backend)
        out = self.tmp / rel
        guide, _ = self.followed(a.persona_id, a.loop_id)
        key = comparison_key(a.mp4, b.mp4, extra=f"pose={self.pose and True}|guide={guide is not None}")
        previous = Comparison.read(self.old / rel)
        if previous is not None and previous.key == key and (self.old / rel / HEATMAP_NAME).is_file():
            out.mkdir(parents=True, exist_ok=True)
            _link_or_copy(self.old / rel / HEATMAP_NAME, out / HEATMAP_NAME)
            previous.write(out)
            self.reused += 1
            return previous, None
        width = a.width or (a.telemetry.width if a.telemetry else 1)
        height = a.height or (a.telemetry.height if a.telemetry else 1)
        tracker = (lambda: PoseTracker(guide, width / height)) if self.pose else None
        self.log(f"comparing {a.key} with {b.backend} ({a.frames} frames)")
        try:
            return compare_clips(a.mp4, b.mp4, out, labels=(a.backend, b.backend), pose=tracker, key=key), None
        except NewsmotionError as exc:
            shutil.rmtree(out, ignore_errors=True)
            return None, str(exc)


def build_studio(
    storage: Storage,
    *,
    bench_results: Path | None = None,
    pose: bool = True,
    log: Log | None = None,
) -> StudioReport:
    """Build the whole site into ``storage.studio_dir`` (replacing the previous one at the end).

    Args:
        storage: where renders, caches and bench results are read and the site is written.
        bench_results: the committed benchmark result records (default ``benchmarks/results``,
            or ``$NEWSMOTION_BENCH_RESULTS``, as the scorecard reads them).
        pose: measure per-frame pose error on A/B pages (mediapipe on every frame of both clips;
            the slow part of a comparison).
        log: progress lines (default: none).

    Returns:
        A :class:`StudioReport`.
    """
    from newsmotion_engine.bench.scorecard import bench_results_dir

    log = log or (lambda message: None)
    bench_results = bench_results if bench_results is not None else bench_results_dir()
    final = storage.studio_dir
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.with_name(f".studio.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    # One build at a time (the asset and the CLI may both run): the second waits, then reuses the
    # first's comparisons.
    with cache_lock(final, timeout=3600):
        try:
            report = _build(storage, tmp, final, bench_results, pose, log)
            _swap(tmp, final)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return StudioReport(**{**report, "root": final, "index": final / "index.html"})


def _swap(tmp: Path, final: Path) -> None:
    """Put the new site in place: the old one is renamed aside first, then removed."""
    aside = final.with_name(f".studio.{uuid.uuid4().hex[:8]}.old")
    if final.exists():
        os.replace(final, aside)
    try:
        os.replace(tmp, final)
    except OSError:
        if aside.exists():
            os.replace(aside, final)
        raise
    shutil.rmtree(aside, ignore_errors=True)


def _build(storage: Storage, tmp: Path, old: Path, bench_results: Path, pose: bool, log: Log) -> dict[str, Any]:
    b = _Builder(storage, tmp, old, bench_results, pose, log)
    shutil.copytree(_HERE / "static", tmp / "static")
    entries = scan_renders(storage)
    log(f"{len(entries)} renders")
    cards = {entry.key: b.media(entry) for entry in entries}
    groups = group_by_pair(entries)
    style = pose_style()

    # A/B pairs first: render pages link to them.
    pairs: dict[tuple[str, str], list[dict[str, Any]]] = {}
    ab_pages: dict[str, str] = {}
    for (persona_id, loop_id), group in groups.items():
        playable = [e for e in group if e.playable]
        for a, bb in itertools.combinations(playable, 2):
            result, problem = b.comparison(a, bb)
            page = ab_page(persona_id, loop_id, a.backend, bb.backend)
            pairs.setdefault((persona_id, loop_id), []).append({"a": a, "b": bb, "page": page, "result": result, "problem": problem})
            ab_pages[f"{persona_id}/{loop_id}/{a.backend}.vs.{bb.backend}"] = page

    problems = [f"{e.key}: {p}" for e in entries for p in e.problems]
    render_pages = {}
    for entry in entries:
        kp, why = b.followed(entry.persona_id, entry.loop_id)
        data = {
            "fps": entry.fps or (entry.telemetry.fps if entry.telemetry else 30),
            "frames": entry.frames or 0,
            "keypoints": _keypoint_frames(kp, style["conf_threshold"]) if kp is not None and entry.playable else None,
            "style": style,
        }
        siblings = [cards[e.key] for e in groups[(entry.persona_id, entry.loop_id)] if e.key != entry.key]
        b.write(
            render_page(entry.persona_id, entry.loop_id, entry.backend), "render.html",
            card=cards[entry.key], entry=entry, rows=telemetry_rows(entry.telemetry), data=data,
            overlay_note=why if kp is None else None, siblings=siblings,
            pairs=[p for p in pairs.get((entry.persona_id, entry.loop_id), []) if entry.key in (p["a"].key, p["b"].key)],
        )  # fmt: skip
        render_pages[entry.key] = render_page(entry.persona_id, entry.loop_id, entry.backend)

    for (persona_id, loop_id), plist in pairs.items():
        for pair in plist:
            a, bb, result = pair["a"], pair["b"], pair["result"]
            rows_a, rows_b = dict(telemetry_rows(a.telemetry)), dict(telemetry_rows(bb.telemetry))
            keys = list(rows_a) + [k for k in rows_b if k not in rows_a]
            side = [(k, rows_a.get(k, ""), rows_b.get(k, "")) for k in keys]
            data = None
            if result is not None:
                data = {
                    "fps": result.fps, "frames": result.frames, "psnr": result.psnr_db, "ssim": result.ssim,
                    "pose": result.pose_error, "labels": [a.backend, bb.backend],
                }  # fmt: skip
            b.write(
                pair["page"], "ab.html", pair=pair, a=cards[a.key], b=cards[bb.key], result=result,
                summary=result.summary if result else {}, side=side, data=data, others=plist,
                heatmap=f"{pair_dir(persona_id, loop_id, a.backend, bb.backend)}/{HEATMAP_NAME}" if result else None,
            )  # fmt: skip

    records = [e.telemetry for e in entries if e.telemetry is not None]
    chart_list = C.scorecard_charts(storage, records, bench_results, on_skip=log)
    (tmp / "charts").mkdir(exist_ok=True)
    for chart in chart_list:
        (tmp / "charts" / f"{chart.name}.svg").write_text(chart.svg, encoding="utf-8")
        (tmp / "charts" / f"{chart.name}.png").write_bytes(chart.png)
    b.write("scorecard.html", "scorecard.html", charts=chart_list, bench_results=str(bench_results))

    personas: dict[str, list[dict[str, Any]]] = {}
    for (persona_id, loop_id), group in groups.items():
        personas.setdefault(persona_id, []).append(
            {"loop": loop_id, "cards": [cards[e.key] for e in group], "pairs": pairs.get((persona_id, loop_id), [])}
        )
    backends = sorted({e.backend for e in entries})
    stories = _story_cards(storage, tmp)
    b.write("index.html", "index.html", personas=personas, backends=backends, total=len(entries),
            comparisons=sum(len(p) for p in pairs.values()), problems=problems, stories=stories)  # fmt: skip
    return {
        "renders": len(entries),
        "stories": len(stories),
        "comparisons": sum(len(p) for p in pairs.values()),
        "reused_comparisons": b.reused,
        "problems": problems,
        "render_pages": render_pages,
        "ab_pages": ab_pages,
    }
