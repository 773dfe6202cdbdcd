"""The render contract: what a render is asked for (:class:`RenderSpec`), what a backend is
(:class:`Backend`), and the registry that turns a backend name into an instance.

A backend is loaded once (``load``; a Dagster resource or the CLI owns it), then asked for the
frames of many (guidance, persona) pairs. Every backend sees the same retargeted pose
(:func:`newsmotion_engine.render.retarget.retarget`), so the warp backend and the diffusion
backends of later issues are interchangeable behind one protocol.

Example::

    backend = get_backend("warp")
    backend.load()
    for frame in backend.frames(guidance, persona, retargeted_kp, RenderSpec()):
        ...  # uint8 RGB [height, width, 3]
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

from newsmotion_engine.errors import NewsmotionError

__all__ = [
    "BACKGROUND_CHROMA_GREEN",
    "Backend",
    "BackendNeeds",
    "InvalidSpecError",
    "RenderSpec",
    "UnknownBackendError",
    "available_backends",
    "get_backend",
    "register_backend",
]

# Broadcast chroma green, #00B140.
BACKGROUND_CHROMA_GREEN: tuple[int, int, int] = (0, 177, 64)

MIN_SIZE = 64
MAX_SIZE = 4096
MIN_FPS = 1
MAX_FPS = 120


class InvalidSpecError(NewsmotionError, ValueError):
    """A render spec value out of range (odd or absurd size, bad fps, bad colour)."""


class UnknownBackendError(NewsmotionError, ValueError):
    """A backend name that is not registered."""


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
        seed: for stochastic backends; the warp backend is deterministic and ignores it.
        background: RGB tuple or ``"#RRGGBB"``; default chroma green ``#00B140``.

    Raises:
        InvalidSpecError: a value out of range, with the rule in the message.
    """

    width: int = 720
    height: int = 1280
    fps: int = 30
    seed: int = 0
    background: tuple[int, int, int] = field(default=BACKGROUND_CHROMA_GREEN)

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
        """JSON-friendly form for telemetry."""
        return {
            "width": self.width,
            "height": self.height,
            "fps": self.fps,
            "seed": self.seed,
            "background": "#{:02X}{:02X}{:02X}".format(*self.background),
        }


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
    frame, in order, each a fresh array the consumer may keep. It must not hold the whole clip.
    Attributes ``name`` (the registry name) and ``needs`` (:class:`BackendNeeds`) are read-only.
    """

    name: str
    needs: BackendNeeds

    def load(self) -> None:
        """Load weights / prepare process-wide state. Idempotent."""
        ...

    def frames(self, guidance: Any, persona: Any, keypoints: np.ndarray, spec: RenderSpec) -> Iterator[np.ndarray]:
        """Yield the clip's frames. ``keypoints`` is the retargeted pose ``[T, 133, 3]`` in the
        persona canvas' normalized coordinates (see ``retarget``)."""
        ...

    def close(self) -> None:
        """Release what ``load`` took. Idempotent."""
        ...

    def describe(self) -> dict[str, Any]:
        """Telemetry about the backend, e.g. ``{"weights": "none", "device": "cpu"}``."""
        ...


BackendFactory = Callable[..., Backend]

_REGISTRY: dict[str, BackendFactory] = {}


def register_backend(name: str, factory: BackendFactory, *, replace: bool = False) -> None:
    """Register ``factory(**config) -> Backend`` under ``name``.

    A second registration of one name is an error unless ``replace=True`` (so two plugins cannot
    silently shadow each other). Factories should import heavy dependencies lazily, inside the
    factory, so listing backends stays cheap.
    """
    if not isinstance(name, str) or not re.fullmatch(r"[a-z0-9][a-z0-9_-]{0,63}", name):
        raise ValueError(f"backend name {name!r} must be a slug ([a-z0-9][a-z0-9_-]*)")
    if name in _REGISTRY and not replace and _REGISTRY[name] is not factory:
        raise ValueError(f"render backend {name!r} is already registered; pass replace=True to override")
    _REGISTRY[name] = factory


def available_backends() -> list[str]:
    """Registered backend names, sorted."""
    return sorted(_REGISTRY)


def get_backend(name: str, **config: Any) -> Backend:
    """A new, not yet loaded backend instance: ``get_backend("warp", threads=2)``.

    Raises:
        UnknownBackendError: ``name`` is not registered; the message lists the known names.
    """
    try:
        factory = _REGISTRY[name]
    except (KeyError, TypeError):
        known = ", ".join(available_backends()) or "(none registered)"
        raise UnknownBackendError(f"unknown render backend {name!r}; known backends: {known}") from None
    return factory(**config)
