"""The render record: one :class:`RenderTelemetry` per rendered clip, beside it as ``{backend}.json``.

This module owns the format: the fields, the schema version, writing (atomic) and reading (with
validation). The writer (:func:`newsmotion_engine.render.clip.render_clip`) and every reader (the
scorecard, the Dagster render asset, the demo, the CLI) go through this class; the columns the
tables show are :attr:`RenderTelemetry.COLUMNS` (and the shorter :attr:`RenderTelemetry.SUMMARY`),
never a key list of their own.

Example::

    tele = RenderTelemetry.read(Path("storage/motion/renders/anna/nod/warp.json"))
    tele.fps_achieved, tele.weights, tele.row()["guidance_cache"]
    tele.pose_fidelity.pck_body if tele.pose_fidelity else tele.pose_fidelity_reason

Versions: 2 added ``pose_fidelity`` (a :class:`PoseFidelity`, or ``null`` with
``pose_fidelity_reason`` saying why it was not measured). Version-1 files are still read: they
come back with ``pose_fidelity=None`` and a reason saying the record predates it (renders treat
such a clip as not current and render it again, so it gets measured). 3 added ``lip_sync`` (a
:class:`LipSync` for a clip rendered with speech, or ``null`` with ``lip_sync_reason``); older
files come back with ``lip_sync=None`` and a reason saying the record predates it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import types
import typing
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from newsmotion_engine.errors import BadInputError

__all__ = ["LAUNCHERS", "SCHEMA_VERSION", "READABLE_VERSIONS", "LipSync", "PoseFidelity", "RenderProvenance",
           "RenderTelemetry", "TelemetryError", "cell_text"]  # fmt: skip

# Bump when a field is removed, changes meaning, or is added without a default; readers refuse
# other versions with a message saying what to do, never guess. A field added with a default that
# is true of every older record (``launcher``, ``keyframes``) keeps the version: old files stay readable.
# The temporary name :meth:`RenderTelemetry.write` uses beside ``{name}``: ``.{name}.{pid}.{8 hex}.tmp``.
TEMP_NAME = re.compile(r"^\.(?P<name>.+)\.\d+\.[0-9a-f]{8}\.tmp$")

SCHEMA_VERSION = 3
# Older versions still read (their missing fields have defaults); anything else is refused.
READABLE_VERSIONS = (1, 2, 3)
# The reason a version-1 record gives for having no pose fidelity.
PRE_FIDELITY_REASON = "recorded by telemetry schema 1, before pose fidelity was measured; re-render to measure it"
# The reason a version-1 or -2 record gives for having no lip-sync score.
PRE_LIP_SYNC_REASON = "recorded by telemetry schema {version}, before lip sync was measured"

# How a render treated each of its caches (the render itself never builds one: "built" means the
# caller built it just before, e.g. `newsmotion render`'s convenience step).
CACHE_STATES = ("hit", "built")
OUTCOMES = ("rendered", "skipped")
# Which process ran the render: the Dagster code server's own ("in-process", also the CLI), an
# engine process started through Dagster Pipes on this machine ("pipes-subprocess"), or a
# Kubernetes pod started through Dagster Pipes ("pipes-k8s"). Records written before the field
# existed read as "in-process", the only launcher there was.
LAUNCHERS = ("in-process", "pipes-subprocess", "pipes-k8s")


class TelemetryError(BadInputError):
    """A telemetry file that cannot be read: not JSON, another schema version, a field missing or
    of the wrong type. ``TelemetryError(path, problem)``."""


@dataclass(frozen=True)
class RenderProvenance:
    """What a render was made from, so an unchanged render can be skipped.

    ``input_digest``: digest of everything the frames depend on (both cache digests, the backend's
    identity, size, fps, background, seed; see :func:`newsmotion_engine.render.job.input_digest`).
    ``guidance_cache`` / ``persona_cache``: ``"hit"`` (loaded as it was) or ``"built"`` (the caller
    built it for this render).
    """

    input_digest: str
    guidance_digest: str
    persona_digest: str
    guidance_cache: str
    persona_cache: str

    def __post_init__(self) -> None:
        for name in ("guidance_cache", "persona_cache"):
            if getattr(self, name) not in CACHE_STATES:
                raise ValueError(f"{name} {getattr(self, name)!r} is not one of {CACHE_STATES}")


@dataclass(frozen=True)
class PoseFidelity:
    """How closely a rendered clip follows the pose it was asked for, measured on the mp4 itself
    (computed by :mod:`newsmotion_engine.render.fidelity`; that module's docstring defines every
    figure). ``version`` is the measurement's own version (``FIDELITY_VERSION``).

    ``pck``: fraction of compared joint-frames whose re-extracted position lies within
    ``threshold_px`` (= ``alpha`` x ``normalizer["px"]``) of the intended one, over every visible
    joint of the compared parts; ``pck_body``: the same over the head, torso and arm joints (the
    target figure); ``per_part``: ``{part: {"pck", "mean_px", "motion_energy_ratio", "joints"}}``
    (``null`` figures for parts the persona does not show); ``mean_px``: mean distance of the
    detected joints from their intended position; ``motion_energy_ratio``: rendered joint motion
    over intended joint motion (head, torso, arms); ``normalizer``: ``{"kind": "torso" |
    "shoulder_width" | "head", "px": ...}``; ``frames_compared`` of ``frames`` (every ``stride``-th
    frame); ``detected_fraction``: share of visible joint-frames the extractor found at all;
    ``calibration``: the extractor's per-joint offsets at rest were subtracted (see the fidelity
    module), with the uncalibrated figures under ``"raw"``.
    """

    version: int
    pck: float | None
    pck_body: float | None
    per_part: dict[str, Any]
    mean_px: float | None
    motion_energy_ratio: float | None
    normalizer: dict[str, Any]
    alpha: float
    threshold_px: float
    frames: int
    frames_compared: int
    stride: int
    joints: int
    detected_fraction: float
    extractor: str
    calibration: dict[str, Any]
    targets: dict[str, Any]
    meets_targets: bool
    seconds: float


@dataclass(frozen=True)
class LipSync:
    """How well a clip rendered with speech moves its lips with it, measured on the mp4 itself
    (computed by :mod:`newsmotion_engine.render.lipsync`; that module's docstring defines every
    figure). ``version`` is the measurement's own version (``LIP_SYNC_VERSION``).

    ``correlation``: Pearson correlation of the mouth aperture read back from the video (inner-lip
    gap / mouth width) with the speech's ``reference`` track (``"open"``, or ``"energy"`` when
    the open track is flat), at the best lag; ``offset_frames``: that lag (positive: the mouth
    moves after the sound); ``correlation_at_zero``: at lag 0; ``max_lag``: the lags searched
    (±); ``frames`` of the clip, ``frames_measured`` with a face found; ``aperture``: ``{"min",
    "median", "max"}`` of the measured aperture; ``targets``: ``{"correlation", "offset_frames"}``.
    """

    version: int
    correlation: float | None
    offset_frames: int | None
    correlation_at_zero: float | None
    reference: str
    max_lag: int
    frames: int
    frames_measured: int
    aperture: dict[str, Any]
    extractor: str
    targets: dict[str, Any]
    meets_targets: bool
    seconds: float


@dataclass(frozen=True)
class RenderTelemetry:
    """One render: what was rendered, how, how fast, and from which inputs.

    Measured: ``frames``, ``fps_achieved`` (frames / wall time, encode included), ``render_ms``
    (time in the backend), ``retarget_ms``, ``mux_ms`` / ``encode_wait_ms`` (encoder), ``wall_s``,
    ``peak_rss_mb`` (process high-water mark). Asked for: ``width``, ``height``, ``fps``,
    ``background`` (``#RRGGBB``), ``seed``. ``backend_info`` is the backend's ``describe()``
    (weights, device, settings). ``provenance`` is ``None`` when ``render_clip`` was called without
    caches (benchmarks on synthetic inputs). ``outcome`` is ``"skipped"`` only on the record a
    render call returns when the clip on disk was already current; files always say ``"rendered"``.
    ``keyframes`` is ``None`` for an every-frame render; with sparse keyframes it is the infill
    stage's record (:class:`~newsmotion_engine.render.keyframes.InfillStats`: ratio, keyframes
    generated, frames infilled, flow / warp ms).
    ``launcher`` is which process ran the render (one of :data:`LAUNCHERS`); a skipped render keeps
    the launcher that rendered the clip.
    ``pose_fidelity`` (:class:`PoseFidelity`) is measured on the written mp4 after the render (not
    part of ``wall_s``); when it is ``None``, ``pose_fidelity_reason`` says why (turned off,
    mediapipe not installed, nothing comparable in the persona). ``lip_sync`` (:class:`LipSync`)
    is measured the same way on a clip rendered with speech; ``lip_sync_reason`` says why not
    (a silent clip, turned off, mediapipe not installed, no face found).
    """

    persona_id: str | None
    loop_id: str | None
    backend: str
    backend_info: dict[str, Any]
    encoder: str
    frames: int
    fps: int
    width: int
    height: int
    background: str
    seed: int
    fps_achieved: float | None
    render_ms: float
    retarget_ms: float
    mux_ms: float
    encode_wait_ms: float
    wall_s: float
    peak_rss_mb: float
    output: str
    created_at: str
    provenance: RenderProvenance | None = None
    keyframes: dict[str, Any] | None = None
    outcome: str = "rendered"
    launcher: str = "in-process"
    pose_fidelity: PoseFidelity | None = None
    pose_fidelity_reason: str | None = None
    lip_sync: LipSync | None = None
    lip_sync_reason: str | None = None
    schema_version: int = SCHEMA_VERSION

    # The scalar columns the scorecard and the Dagster render metadata show, in order.
    COLUMNS: ClassVar[tuple[str, ...]] = (
        "persona_id", "loop_id", "backend", "weights", "encoder", "frames", "fps", "fps_achieved",
        "width", "height", "render_ms", "mux_ms", "wall_s", "peak_rss_mb", "guidance_cache",
        "persona_cache", "launcher", "pose_pck", "pose_pck_body", "pose_mean_px", "motion_energy_ratio",
        "lip_sync_correlation", "lip_sync_offset_frames", "input_digest", "output",
    )  # fmt: skip
    # The few a terminal table has room for (CLI scorecard, demo).
    SUMMARY: ClassVar[tuple[str, ...]] = (
        "persona_id", "loop_id", "backend", "weights", "encoder", "frames", "fps_achieved", "wall_s",
        "pose_pck_body", "motion_energy_ratio", "guidance_cache", "persona_cache", "launcher",
    )  # fmt: skip

    # The badges the studio shows on each render's card, in order.
    BADGES: ClassVar[tuple[str, ...]] = (
        "backend", "weights", "fps_achieved", "wall_s", "peak_vram_gib", "guidance_cache", "persona_cache",
        "pose_fidelity_pck", "lip_sync_correlation",
    )  # fmt: skip

    def __post_init__(self) -> None:
        if self.outcome not in OUTCOMES:
            raise ValueError(f"outcome {self.outcome!r} is not one of {OUTCOMES}")
        if self.launcher not in LAUNCHERS:
            raise ValueError(f"launcher {self.launcher!r} is not one of {LAUNCHERS}")

    # ------------------------------------------------------------------ derived columns
    @property
    def weights(self) -> str | None:
        """Which weights rendered it (``"none"`` for warp, ``"random weights"`` for a preset)."""
        value = self.backend_info.get("weights")
        return None if value is None else str(value)

    @property
    def input_digest(self) -> str | None:
        return self.provenance.input_digest if self.provenance else None

    @property
    def guidance_cache(self) -> str | None:
        return self.provenance.guidance_cache if self.provenance else None

    @property
    def persona_cache(self) -> str | None:
        return self.provenance.persona_cache if self.provenance else None

    @property
    def peak_vram_gib(self) -> float | None:
        """Peak GPU memory of the render, when the backend measured one (its ``last_render`` report
        in ``backend_info``; CPU backends have none)."""
        last = self.backend_info.get("last_render")
        value = last.get("peak_vram_gib") if isinstance(last, dict) else None
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None

    @property
    def pose_fidelity_pck(self) -> float | None:
        """The studio badge's pose-fidelity figure: :attr:`pose_pck_body` (PCK@0.05 over the head,
        torso and arm joints, the issue's target figure); ``None`` when not measured."""
        return self.pose_pck_body

    @property
    def pose_pck(self) -> float | None:
        """:attr:`PoseFidelity.pck` (``None`` when not measured)."""
        return self.pose_fidelity.pck if self.pose_fidelity else None

    @property
    def pose_pck_body(self) -> float | None:
        """:attr:`PoseFidelity.pck_body`: PCK over the head, torso and arm joints."""
        return self.pose_fidelity.pck_body if self.pose_fidelity else None

    @property
    def pose_mean_px(self) -> float | None:
        return self.pose_fidelity.mean_px if self.pose_fidelity else None

    @property
    def motion_energy_ratio(self) -> float | None:
        return self.pose_fidelity.motion_energy_ratio if self.pose_fidelity else None

    @property
    def lip_sync_correlation(self) -> float | None:
        """:attr:`LipSync.correlation` at the best lag (``None`` when not measured)."""
        return self.lip_sync.correlation if self.lip_sync else None

    @property
    def lip_sync_offset_frames(self) -> int | None:
        """:attr:`LipSync.offset_frames`: the audio-video offset in frames (``None`` when not measured)."""
        return self.lip_sync.offset_frames if self.lip_sync else None

    def row(self, columns: tuple[str, ...] | None = None) -> dict[str, Any]:
        """``{column: value}`` for :attr:`COLUMNS` (or the given ones), scalars only."""
        return {name: getattr(self, name) for name in (columns or self.COLUMNS)}

    @classmethod
    def column_kinds(cls) -> dict[str, str]:
        """``{column: "int" | "float" | "string"}`` for :attr:`COLUMNS` (table schemas)."""
        hints = typing.get_type_hints(cls)
        kinds = {}
        for name in cls.COLUMNS:
            attr = getattr(cls, name, None)
            if isinstance(attr, property):  # a derived column: its return annotation
                hint = typing.get_type_hints(attr.fget).get("return", str)
            else:
                hint = hints.get(name, str)
            base = _strip_optional(hint)
            kinds[name] = "int" if base is int else "float" if base is float else "string"
        return kinds

    # ------------------------------------------------------------------ JSON
    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str | bytes, path: Path | str = "<telemetry>") -> RenderTelemetry:
        """Parse and validate; raises :class:`TelemetryError` naming ``path`` and the problem."""
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise TelemetryError(path, f"telemetry is not valid JSON ({exc})") from None
        if not isinstance(data, dict):
            raise TelemetryError(path, "telemetry is not a JSON object")
        version = data.get("schema_version")
        if version is None:
            raise TelemetryError(
                path, "telemetry has no schema_version (written by an older newsmotion); re-render the clip"
            )
        if version not in READABLE_VERSIONS or isinstance(version, bool):
            raise TelemetryError(
                path,
                f"telemetry schema version {version!r}; this newsmotion reads {', '.join(map(str, READABLE_VERSIONS))} "
                + ("(re-render the clip)" if isinstance(version, int) and version < SCHEMA_VERSION else "(upgrade newsmotion)"),
            )
        if version == 1:  # no pose fidelity then: say so rather than leave it unexplained
            data = {**data, "pose_fidelity": None, "pose_fidelity_reason": PRE_FIDELITY_REASON}
        if version < 3:  # no lip sync then
            data = {**data, "lip_sync": None, "lip_sync_reason": PRE_LIP_SYNC_REASON.format(version=version)}
        return _build(cls, data, path, "")

    def write(self, path: Path | str) -> None:
        """Write atomically (temp file + rename, :data:`TEMP_NAME`): a reader sees the old record
        or the new one."""
        path = Path(path)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
        try:
            tmp.write_text(self.to_json(), encoding="utf-8")
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)

    @classmethod
    def read(cls, path: Path | str) -> RenderTelemetry:
        """Read and validate ``path``; :class:`TelemetryError` (naming it) when it cannot be used."""
        try:
            text = Path(path).read_bytes()
        except OSError as exc:
            raise TelemetryError(path, f"cannot read the telemetry ({exc.strerror or exc})") from None
        return cls.from_json(text, path)


def cell_text(value: Any) -> str:
    """A value of :meth:`RenderTelemetry.row` as table text: ``-`` when missing (``None`` or NaN,
    as pandas gives), floats to two decimals."""
    if value is None or (isinstance(value, float) and value != value):
        return "-"
    if isinstance(value, float):
        return f"{value:.2f}"
    return str(value)


def _strip_optional(hint: Any) -> Any:
    """``X | None`` -> ``X``; anything else unchanged."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        return args[0] if len(args) == 1 else hint
    return hint


def _build(cls: type, data: dict[str, Any], path: Path | str, prefix: str) -> Any:
    """``cls(**data)`` after checking every field is present (unless it has a default) and of its
    annotated type; nested dataclasses are built the same way."""
    hints = typing.get_type_hints(cls)
    values: dict[str, Any] = {}
    for field in dataclasses.fields(cls):
        name = f"{prefix}{field.name}"
        if field.name not in data:
            if field.default is dataclasses.MISSING:
                raise TelemetryError(path, f"telemetry lacks the field {name!r}")
            continue
        values[field.name] = _check(data[field.name], hints[field.name], name, path)
    try:
        return cls(**values)
    except ValueError as exc:
        raise TelemetryError(path, f"telemetry {prefix.rstrip('.') or 'record'}: {exc}") from None


def _check(value: Any, hint: Any, name: str, path: Path | str) -> Any:
    optional = _strip_optional(hint) is not hint
    base = _strip_optional(hint)
    if value is None:
        if optional:
            return None
        raise TelemetryError(path, f"telemetry field {name!r} is null")
    if dataclasses.is_dataclass(base):
        if not isinstance(value, dict):
            raise TelemetryError(path, f"telemetry field {name!r} is not an object")
        return _build(base, value, path, f"{name}.")
    origin = typing.get_origin(base) or base
    ok = {
        bool: lambda v: isinstance(v, bool),
        int: lambda v: isinstance(v, int) and not isinstance(v, bool),
        float: lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
        str: lambda v: isinstance(v, str),
        dict: lambda v: isinstance(v, dict),
    }[origin](value)
    if not ok:
        raise TelemetryError(path, f"telemetry field {name!r} is {type(value).__name__}, expected {origin.__name__}")
    return float(value) if origin is float else value
