"""The render contract: what a render is asked for (:class:`RenderSpec`), what a backend is
(:class:`Backend`), its typed options (:class:`BackendOptions`), and the registry that turns a
backend name and an options mapping into an instance.

A backend is loaded once (``load``; a Dagster resource or the CLI owns it), then asked for the
frames of many (guidance, persona) pairs. Every backend sees the same retargeted pose
(:func:`newsmotion_engine.render.retarget.retarget`), so the warp backend and the diffusion
backends are interchangeable behind one protocol.

Options: every backend registers a frozen options dataclass; :func:`get_backend` validates the
flat mapping (CLI ``-o KEY=VALUE``, the Dagster resource's ``options``) through it before
constructing, so an unknown key or a value out of range is one :class:`BackendOptionError` naming
the backend and listing its known options, whatever the backend.

Caches: renders only load. A backend that derives its own sub-caches from the guidance or persona
caches (diffusion latents, embeddings) builds them in ``prepare_guidance`` / ``prepare_persona``
(called by the CLI before a render and by the Dagster sub-cache assets); ``frames`` raises a
:class:`BackendCacheError` naming what to build when one is missing or stale.

Example::

    backend = get_backend("warp", threads=2)
    backend.load()
    backend.prepare_guidance(guidance, spec); backend.prepare_persona(persona, spec)  # no-ops for warp
    for frame in backend.frames(guidance, persona, retargeted_kp, RenderSpec()):
        ...  # uint8 RGB [height, width, 3]

Speech: ``frames(..., visemes=track)`` hands a backend the mouth shapes to perform, one
:class:`~newsmotion_engine.speech.visemes.VisemeTrack` frame per frame it yields. A backend whose
class attribute ``moves_lips`` is ``True`` opens and shapes the mouth from it; the others accept the
keyword and ignore it (``moves_lips = False``), so every backend can be driven the same way and the
render's telemetry says whether the lips moved. ``frames(..., speech=track)`` hands it the sound
itself, a :class:`~newsmotion_engine.speech.audio.SpeechTrack` exactly as long as the clip
(:func:`check_speech`): a backend whose class attribute ``hears_speech`` is ``True`` (audio-driven,
``echomimic-v3``) performs it; the others accept the keyword and ignore it.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

import numpy as np

from newsmotion_engine.errors import (
    CacheCorruptError,
    CacheError,
    CacheMissingError,
    CacheNotReadyError,
    CacheStaleError,
    NewsmotionError,
)
from newsmotion_engine.video.spec import BACKGROUND_CHROMA_GREEN, MAX_KEYFRAME_RATIO

if TYPE_CHECKING:  # the speech package is not needed to render silent clips
    from newsmotion_engine.speech.audio import SpeechTrack
    from newsmotion_engine.speech.visemes import VisemeTrack

__all__ = [
    "BACKGROUND_CHROMA_GREEN",
    "Backend",
    "BackendCacheCorruptError",
    "BackendCacheError",
    "BackendCacheMissingError",
    "BackendCacheStaleError",
    "BackendNeeds",
    "BackendOptionError",
    "BackendOptions",
    "InvalidSpecError",
    "RenderSpec",
    "SpeechConflictError",
    "SpeechMismatchError",
    "UnknownBackendError",
    "VisemeMismatchError",
    "available_backends",
    "check_speech",
    "check_visemes",
    "get_backend",
    "hears_speech",
    "moves_lips",
    "own_clip_frames",
    "refuse_second_speech",
    "register_backend",
    "validate_options",
]


MIN_SIZE = 64
MAX_SIZE = 4096
MIN_FPS = 1
MAX_FPS = 120


class InvalidSpecError(NewsmotionError, ValueError):
    """A render spec value out of range (odd or absurd size, bad fps, bad colour)."""


class UnknownBackendError(NewsmotionError, ValueError):
    """A backend name that is not registered."""


class BackendOptionError(NewsmotionError, ValueError):
    """A backend option that is unknown or out of range; the message names the backend, the
    option and the rule (or the known options)."""


class VisemeMismatchError(NewsmotionError, ValueError):
    """A viseme track that does not fit the clip it should drive (another length)."""


def check_visemes(visemes: VisemeTrack | None, frames: int, *, what: str = "clip") -> None:
    """Refuse a viseme track that is not one frame per rendered frame (``None`` passes).

    Raises:
        VisemeMismatchError: ``len(visemes) != frames``, with both lengths and how to fix it.
    """
    if visemes is not None and len(visemes) != frames:
        raise VisemeMismatchError(
            f"viseme track has {len(visemes)} frames for a {frames}-frame {what}: "
            "give one viseme frame per rendered frame (VisemeTrack.slice(start, stop) cuts a speech's track)"
        )


class SpeechMismatchError(NewsmotionError, ValueError):
    """A speech track that does not fit the clip it should drive (another duration)."""


def check_speech(speech: SpeechTrack | None, frames: int, fps: int, *, what: str = "clip") -> None:
    """Refuse a speech track that is not exactly ``frames / fps`` seconds (``None`` passes).

    Raises:
        SpeechMismatchError: another sample count, with both durations and how to fix it.
    """
    if speech is None:
        return
    expected = round(frames / fps * speech.sample_rate)
    if len(speech.samples) != expected:
        raise SpeechMismatchError(
            f"speech track {speech.label!r} has {len(speech.samples)} samples ({speech.duration_s:.3f} s) for a "
            f"{frames}-frame {what} at {fps} fps ({expected} samples): give exactly the clip's duration of audio "
            "(pad with silence or cut it to the clip)"
        )


class SpeechConflictError(BackendOptionError):
    """A speech track handed to a backend that performs a speech of its own (an option)."""


def refuse_second_speech(backend: Any, heard: str) -> None:
    """Refuse handing ``heard`` (what the render would perform, e.g. ``"the story's speech"``) to a
    backend that already performs a speech of its own: its ``own_speech()`` method says which
    (echomimic-v3: its ``speech`` option), or None; a backend without the method has none.

    Raises:
        SpeechConflictError: naming both speeches and how to fix it.
    """
    method = getattr(backend, "own_speech", None)
    own = method() if callable(method) else None
    if own is not None:
        raise SpeechConflictError(
            f"backend {backend.name!r} performs {own} and would be handed {heard}: two speeches for one clip; "
            "drop the backend's speech option (-o speech=...) to perform the render's, or render that speech alone "
            "with `newsmotion render ... -o speech=ID`"
        )


def hears_speech(backend: Any) -> bool:
    """Whether ``backend`` performs a speech track's audio (its ``hears_speech`` class attribute;
    a backend without one does not)."""
    return bool(getattr(backend, "hears_speech", False))


def moves_lips(backend: Any) -> bool:
    """Whether ``backend`` performs a viseme track (its ``moves_lips`` class attribute; a backend
    without one does not)."""
    return bool(getattr(backend, "moves_lips", False))


def own_clip_frames(backend: Any, guidance: Any, spec: RenderSpec) -> int | None:
    """The frame count a backend sets for its clip, or None (the clip has the loop's length).

    A backend that drives its own length has a ``clip_frames(guidance, spec)`` method: an
    audio-driven backend performing a speech (``echomimic-v3``'s ``speech`` option) renders the
    speech's length; the loop's pose, which such a model does not follow, is then cycled to it.
    """
    method = getattr(backend, "clip_frames", None)
    return int(method(guidance, spec)) if callable(method) else None


class BackendCacheError(CacheNotReadyError, CacheError):
    """A sub-cache a backend derives from the guidance or persona cache is not ready at render
    time. Renders only load caches: build it with ``backend.prepare_guidance`` /
    ``backend.prepare_persona`` (Dagster: materialize :attr:`asset` for :attr:`cache_id`; the CLI's
    ``newsmotion render`` does it first). It is a :class:`CacheNotReadyError` (what, state,
    detail, remedy) like the base caches' errors, and the concrete classes are also the matching
    :class:`CacheMissingError` / :class:`CacheStaleError` / :class:`CacheCorruptError`.

    Attributes: ``backend``, ``tier`` (``"guidance"`` or ``"persona"``), ``cache_id`` (loop or
    persona id), ``size`` (``"WxH"``), ``asset`` (the Dagster asset that builds it), ``path``.
    """

    default_state = "not ready"

    def __init__(self, path: Path | str, *, backend: str, tier: str, cache_id: str, size: str, detail: str = ""):
        self.backend, self.tier, self.cache_id, self.size = backend, tier, cache_id, size
        self.asset = f"backend_{tier}_cache"
        self.what = f"{backend} {tier} artifacts for {'loop' if tier == 'guidance' else 'persona'} {cache_id!r} at {size}"
        self.state = self.default_state
        self.detail = detail
        self.remedy = f"materialize {self.asset}[{cache_id}] in Dagster or run `newsmotion render` (which builds them first)"
        self.path = Path(path)
        message = f"{self.what} are {self.state}{f' ({detail})' if detail else ''}: {self.remedy}; looked in {path}"
        self.problem = message
        Exception.__init__(self, message)

    @classmethod
    def from_cache_error(cls, exc: CacheError, *, backend: str, tier: str, cache_id: str, size: str) -> BackendCacheError:
        """The matching subclass for a :class:`CacheError` raised while reading the sub-cache."""
        if isinstance(exc, CacheMissingError):
            return BackendCacheMissingError(exc.path, backend=backend, tier=tier, cache_id=cache_id, size=size)
        kind = BackendCacheStaleError if isinstance(exc, CacheStaleError) else BackendCacheCorruptError
        return kind(exc.path, backend=backend, tier=tier, cache_id=cache_id, size=size, detail=exc.problem)


class BackendCacheMissingError(BackendCacheError, CacheMissingError):
    """A backend sub-cache does not exist yet."""

    default_state = "missing"


class BackendCacheStaleError(BackendCacheError, CacheStaleError):
    """A backend sub-cache was built from another source, model or parameters."""

    default_state = "stale"


class BackendCacheCorruptError(BackendCacheError, CacheCorruptError):
    """A backend sub-cache is damaged (``prepare_*`` rebuilds it)."""

    default_state = "corrupt"


def _parse_background(value: Any) -> tuple[int, int, int]:
    """``(r, g, b)`` ints 0..255, or a ``"#RRGGBB"`` string -> an RGB tuple."""
    if isinstance(value, str):
        m = re.fullmatch(r"#?([0-9a-fA-F]{6})", value.strip())
        if not m:
            raise InvalidSpecError(f"background {value!r} is not a colour: use '#RRGGBB' or (r, g, b)")
        h = m.group(1)
        return (int(h[0:2], 16), int(h[2:4], 16), int(h[4:6], 16))
    try:
        rgb = tuple(value)
    except TypeError:
        raise InvalidSpecError(f"background {value!r} is not a colour: use '#RRGGBB' or (r, g, b)") from None
    if len(rgb) != 3 or not all(isinstance(c, (int, np.integer)) and 0 <= int(c) <= 255 for c in rgb):
        raise InvalidSpecError(f"background {value!r} is not a colour: give three integers 0..255")
    return tuple(int(c) for c in rgb)  # type: ignore[return-value]


@dataclass(frozen=True)
class RenderSpec:
    """What to render: output size, frame rate, seed and background colour.

    Args:
        width, height: output pixels; even (h264 yuv420p needs it), 64..4096. Default 720x1280.
        fps: output frame rate, 1..120. Default 30.
        seed: for stochastic backends; the warp backend uses it only for a speaking face's
            blinks and head sway (same seed, same blinks).
        background: RGB tuple or ``"#RRGGBB"``; default chroma green ``#00B140``.
        keyframes: sparse keyframes, a render-level stage for every backend: ``1`` (default)
            renders every frame; ``N`` (2..8) has the backend generate every N-th frame (the
            driving pose sampled at that rate) and synthesizes the frames between by flow infill
            (:mod:`newsmotion_engine.video.infill`). 1:2 or 1:3 is what the infill bench measures.

    Raises:
        InvalidSpecError: a value out of range, with the rule in the message.
    """

    width: int = 720
    height: int = 1280
    fps: int = 30
    seed: int = 0
    background: tuple[int, int, int] = field(default=BACKGROUND_CHROMA_GREEN)
    keyframes: int = 1

    def __post_init__(self) -> None:
        for name in ("width", "height"):
            v = getattr(self, name)
            if not isinstance(v, (int, np.integer)) or isinstance(v, bool):
                raise InvalidSpecError(f"render {name} {v!r} is not an integer")
            if not MIN_SIZE <= v <= MAX_SIZE:
                raise InvalidSpecError(f"render {name} {v} is out of range: use {MIN_SIZE}..{MAX_SIZE} pixels")
            if v % 2:
                raise InvalidSpecError(
                    f"render {name} {v} is odd: h264 (yuv420p) needs an even size, e.g. {v + 1}"
                )
        if not isinstance(self.fps, (int, np.integer)) or isinstance(self.fps, bool) or not MIN_FPS <= self.fps <= MAX_FPS:
            raise InvalidSpecError(f"render fps {self.fps!r} is out of range: use an integer {MIN_FPS}..{MAX_FPS}")
        if not isinstance(self.seed, (int, np.integer)) or isinstance(self.seed, bool):
            raise InvalidSpecError(f"render seed {self.seed!r} is not an integer")
        k = self.keyframes
        if not isinstance(k, (int, np.integer)) or isinstance(k, bool) or not 1 <= k <= MAX_KEYFRAME_RATIO:
            raise InvalidSpecError(
                f"render keyframes {k!r} is out of range: use an integer 1..{MAX_KEYFRAME_RATIO} "
                "(1 = every frame, 2 = every 2nd frame generated and the rest infilled)"
            )
        object.__setattr__(self, "keyframes", int(k))
        # Normalise ints and the colour so equal specs hash equal (backends cache per spec).
        object.__setattr__(self, "width", int(self.width))
        object.__setattr__(self, "height", int(self.height))
        object.__setattr__(self, "fps", int(self.fps))
        object.__setattr__(self, "seed", int(self.seed))
        object.__setattr__(self, "background", _parse_background(self.background))

    @property
    def size(self) -> tuple[int, int]:
        """``(width, height)``."""
        return (self.width, self.height)

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly form for telemetry (and the render's input digest). ``keyframes`` appears
        only when sparse (> 1), so the digests of every-frame renders stay what they were."""
        out: dict[str, Any] = {
            "width": self.width,
            "height": self.height,
            "fps": self.fps,
            "seed": self.seed,
            "background": "#{:02X}{:02X}{:02X}".format(*self.background),
        }
        if self.keyframes > 1:
            out["keyframes"] = self.keyframes
        return out


@dataclass(frozen=True)
class BackendNeeds:
    """Which cached artifacts a backend reads.

    ``guidance``: names of Tier-1 artifacts (``"keypoints"`` always; diffusion backends add e.g.
    ``"pose_video"``). ``persona``: names of Tier-2 artifacts (``"portrait"``, ``"person_mask"``,
    ``"face_mask"``, ``"landmarks"``; diffusion backends add ``"ref_latents"``, ``"image_tokens"``).
    The orchestration layer uses this to build only the caches a backend will read.
    """

    guidance: frozenset[str] = frozenset({"keypoints"})
    persona: frozenset[str] = frozenset()


@runtime_checkable
class Backend(Protocol):
    """A renderer of (guidance, persona) pairs.

    Lifecycle: construct (cheap, via :func:`get_backend`), ``load()`` once (weights, thread
    settings; idempotent), ``frames(...)`` any number of times, ``close()`` at the end.

    ``frames`` yields exactly one uint8 RGB ``[spec.height, spec.width, 3]`` array per guidance
    frame, in order, each a fresh array the consumer may keep. It must not hold the whole clip,
    and it never builds caches: it raises :class:`BackendCacheError` when a sub-cache that
    ``prepare_guidance`` / ``prepare_persona`` build is missing or stale.
    Attributes ``name`` (the registry name), ``needs`` (:class:`BackendNeeds`), ``moves_lips``
    (whether ``frames`` performs a viseme track) and ``hears_speech`` (whether it performs a speech
    track's audio) are read-only class attributes; ``False`` backends accept and ignore the keyword.
    """

    name: str
    needs: BackendNeeds
    moves_lips: ClassVar[bool]
    hears_speech: ClassVar[bool]

    def load(self) -> None:
        """Load weights / prepare process-wide state. Idempotent."""
        ...

    def prepare_guidance(self, guidance: Any, spec: RenderSpec) -> bool:
        """Build (or validate) this backend's sub-caches derived from one loop's guidance cache at
        ``spec``'s size; ``True`` when something was built. Backends without sub-caches return
        ``False``. Call before ``frames`` (renders only load)."""
        ...

    def prepare_persona(self, persona: Any, spec: RenderSpec) -> bool:
        """As :meth:`prepare_guidance`, for one persona's appearance cache."""
        ...

    def frames(
        self, guidance: Any, persona: Any, keypoints: np.ndarray, spec: RenderSpec, *, visemes: VisemeTrack | None = None,
        speech: SpeechTrack | None = None,
    ) -> Iterator[np.ndarray]:
        """Yield the clip's frames. ``keypoints`` is the retargeted pose ``[T, 133, 3]`` in the
        persona canvas' normalized coordinates (see ``retarget``). ``visemes``: the mouth shapes
        to perform, ``T`` frames (:func:`check_visemes`), or ``None`` for a silent clip; a backend
        with ``moves_lips = False`` ignores it. ``speech``: the clip's sound, ``T / spec.fps``
        seconds (:func:`check_speech`); a backend with ``hears_speech = False`` ignores it."""
        ...

    def close(self) -> None:
        """Release what ``load`` took. Idempotent."""
        ...

    def describe(self) -> dict[str, Any]:
        """Telemetry about the backend, e.g. ``{"weights": "none", "device": "cpu"}``."""
        ...


class BackendOptions:
    """Base of a backend's typed options: subclass it with a frozen dataclass whose fields are
    the options (with defaults) and whose ``__post_init__`` validates them with
    :meth:`option_error`. Set ``backend`` to the registry name.

    :meth:`from_mapping` is the one edge parser of a flat options mapping (the CLI's ``-o``, the
    Dagster resource's ``options``): unknown keys raise :class:`BackendOptionError` listing the
    known ones. A backend with options that are not plain fields overrides it (wan-animate parses
    its acceleration keys into typed configs).
    """

    backend: ClassVar[str] = "?"

    @classmethod
    def known_options(cls) -> tuple[str, ...]:
        """The option keys :meth:`from_mapping` accepts, sorted."""
        return tuple(sorted(f.name for f in dataclasses.fields(cls)))  # type: ignore[arg-type]

    @classmethod
    def unknown_options_error(cls, unknown: list[str]) -> BackendOptionError:
        return BackendOptionError(
            f"unknown {cls.backend} option(s) {', '.join(sorted(unknown))}; known: {', '.join(cls.known_options())}"
        )

    @classmethod
    def from_mapping(cls, options: Mapping[str, Any] | None = None, **kw: Any):
        """Validated options from a flat mapping (``kw`` overrides it)."""
        merged = {**(dict(options) if options else {}), **kw}
        unknown = [k for k in merged if k not in cls.known_options()]
        if unknown:
            raise cls.unknown_options_error(unknown)
        return cls(**merged)

    def option_error(self, name: str, rule: str) -> BackendOptionError:
        """``BackendOptionError("<backend> option <name>=<value>: <rule>")``."""
        return BackendOptionError(f"{self.backend} option {name}={getattr(self, name)!r}: {rule}")

    def as_mapping(self) -> dict[str, Any]:
        """The options as a flat dict (what :meth:`from_mapping` takes back)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}  # type: ignore[arg-type]


BackendFactory = Callable[..., Backend]


@dataclass(frozen=True)
class _Registration:
    factory: BackendFactory
    options: type[BackendOptions] | None


_REGISTRY: dict[str, _Registration] = {}


def register_backend(name: str, factory: BackendFactory, *, options: type[BackendOptions] | None = None,
                     replace: bool = False) -> None:  # fmt: skip
    """Register a backend under ``name``.

    With ``options`` (a :class:`BackendOptions` subclass; every built-in backend has one),
    :func:`get_backend` validates the options mapping through ``options.from_mapping`` and calls
    ``factory(validated_options)``. Without it, ``factory(**mapping)`` receives the raw mapping
    (for small test doubles).

    A second registration of one name is an error unless ``replace=True`` (so two plugins cannot
    silently shadow each other). Factories should import heavy dependencies lazily, inside the
    factory, so listing backends stays cheap.
    """
    if not isinstance(name, str) or not re.fullmatch(r"[a-z0-9][a-z0-9_-]{0,63}", name):
        raise ValueError(f"backend name {name!r} must be a slug ([a-z0-9][a-z0-9_-]*)")
    if options is not None and not (isinstance(options, type) and issubclass(options, BackendOptions)):
        raise TypeError(f"options for backend {name!r} must be a BackendOptions subclass, got {options!r}")
    old = _REGISTRY.get(name)
    if old is not None and not replace and (old.factory is not factory or old.options is not options):
        raise ValueError(f"render backend {name!r} is already registered; pass replace=True to override")
    _REGISTRY[name] = _Registration(factory, options)


def available_backends() -> list[str]:
    """Registered backend names, sorted."""
    return sorted(_REGISTRY)


def _registration(name: str) -> _Registration:
    try:
        return _REGISTRY[name]
    except (KeyError, TypeError):
        known = ", ".join(available_backends()) or "(none registered)"
        raise UnknownBackendError(f"unknown render backend {name!r}; known backends: {known}") from None


def validate_options(name: str, options: Mapping[str, Any] | None = None) -> BackendOptions | dict[str, Any]:
    """The typed options of backend ``name`` from a flat mapping, without constructing the backend
    (e.g. to check a Dagster resource's config early).

    Raises:
        UnknownBackendError: ``name`` is not registered.
        BackendOptionError: an unknown option or a value out of range.
    """
    reg = _registration(name)
    if reg.options is None:
        return dict(options or {})
    return reg.options.from_mapping(options or {})


def get_backend(name: str, **options: Any) -> Backend:
    """A new, not yet loaded backend instance: ``get_backend("warp", threads=2)``; the options
    are validated first (:func:`validate_options`).

    Raises:
        UnknownBackendError: ``name`` is not registered; the message lists the known names.
        BackendOptionError: an unknown option (the message lists the known ones) or a value out
            of range (the message gives the rule).
    """
    reg = _registration(name)
    if reg.options is None:
        return reg.factory(**options)
    return reg.factory(reg.options.from_mapping(options))
