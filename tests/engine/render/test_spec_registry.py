"""RenderSpec validation and the backend registry."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import pytest

from newsmotion_engine.errors import NewsmotionError
from newsmotion_engine.render import (
    Backend,
    BackendNeeds,
    InvalidSpecError,
    RenderSpec,
    UnknownBackendError,
    available_backends,
    get_backend,
    register_backend,
)
from newsmotion_engine.render import base as render_base


def test_default_spec_is_720x1280_30fps_chroma_green():
    spec = RenderSpec()
    assert (spec.width, spec.height, spec.fps, spec.seed) == (720, 1280, 30, 0)
    assert spec.background == (0, 177, 64)
    assert spec.as_dict()["background"] == "#00B140"


@pytest.mark.parametrize(
    "kwargs, words",
    [
        ({"width": 721}, ["width", "721", "odd"]),
        ({"height": 1279}, ["height", "odd"]),
        ({"width": 100000}, ["width", "100000", "4096"]),
        ({"height": 2}, ["height", "64"]),
        ({"width": 0}, ["width"]),
        ({"width": 720.0}, ["width", "integer"]),
        ({"fps": 0}, ["fps"]),
        ({"fps": 1000}, ["fps"]),
        ({"background": "green"}, ["background"]),
        ({"background": (0, 300, 0)}, ["background"]),
    ],
)
def test_bad_spec_values_raise_a_clear_error(kwargs, words):
    with pytest.raises(InvalidSpecError) as info:
        RenderSpec(**kwargs)
    assert isinstance(info.value, NewsmotionError)
    for w in words:
        assert w in str(info.value)


def test_background_accepts_hex_and_equal_specs_hash_equal():
    a = RenderSpec(background="#00b140")
    b = RenderSpec(background=[0, 177, 64])
    assert a.background == (0, 177, 64)
    assert a == b and hash(a) == hash(b)


def test_unknown_backend_lists_the_known_ones():
    with pytest.raises(UnknownBackendError) as info:
        get_backend("no-such-backend")
    msg = str(info.value)
    assert "no-such-backend" in msg and "warp" in msg


def test_warp_is_registered_and_satisfies_the_protocol():
    assert "warp" in available_backends()
    backend = get_backend("warp", threads=1)
    assert isinstance(backend, Backend)
    assert backend.name == "warp"
    assert "landmarks" in backend.needs.persona and "keypoints" in backend.needs.guidance
    assert backend.describe()["weights"] == "none"


def test_register_backend_refuses_silent_shadowing(monkeypatch):
    monkeypatch.setattr(render_base, "_REGISTRY", dict(render_base._REGISTRY))

    class Dummy:
        name = "dummy"
        needs = BackendNeeds()

        def __init__(self, **config):
            self.config = config

    register_backend("dummy", Dummy)
    assert get_backend("dummy", a=1).config == {"a": 1}
    with pytest.raises(ValueError, match="already registered"):
        register_backend("dummy", lambda **c: Dummy(**c))
    register_backend("dummy", lambda **c: "replaced", replace=True)
    assert get_backend("dummy") == "replaced"
    with pytest.raises(ValueError, match="slug"):
        register_backend("Bad Name", Dummy)


# ---------------------------------------------------------------- one option validation path
def test_register_backend_with_options_validates_before_constructing(monkeypatch):
    from newsmotion_engine.render import BackendOptions, BackendOptionError, validate_options

    monkeypatch.setattr(render_base, "_REGISTRY", dict(render_base._REGISTRY))

    @dataclasses.dataclass(frozen=True)
    class DummyOptions(BackendOptions):
        backend: ClassVar[str] = "dummy"
        size: int = 1

        def __post_init__(self):
            if self.size < 1:
                raise self.option_error("size", "use 1 or more")

    built = []
    register_backend("dummy", lambda opts: built.append(opts) or opts, options=DummyOptions)
    assert get_backend("dummy", size=3) == DummyOptions(size=3) and validate_options("dummy", {}) == DummyOptions()
    with pytest.raises(BackendOptionError, match=r"unknown dummy option\(s\) colour; known: size"):
        get_backend("dummy", colour="red")
    with pytest.raises(BackendOptionError, match="dummy option size=0: use 1 or more"):
        get_backend("dummy", size=0)
    assert len(built) == 1  # the bad ones never reached the factory
    with pytest.raises(TypeError, match="BackendOptions subclass"):
        register_backend("dummy2", lambda **c: None, options=dict)


@pytest.mark.parametrize(
    "backend, options, words",
    [
        ("warp", {"foo": "bar"}, ["unknown warp option(s) foo", "known:", "grid_step", "threads"]),
        ("warp", {"grid_step": 1}, ["warp option grid_step=1", ">= 2"]),
        ("warp", {"threads": "two"}, ["warp option threads='two'", "integer"]),
        ("warp", {"face_rigidity": 1.5}, ["warp option face_rigidity=1.5", "0..1"]),
        ("wan-animate", {"foo": "bar"}, ["unknown wan-animate option(s) foo", "known:", "teacache", "steps"]),
        ("wan-animate", {"steps": 0}, ["wan-animate option steps=0", "1..1000"]),
        ("wan-animate", {"teacache": 20}, ["wan-animate option teacache=20", "threshold"]),
        ("wan-animate", {"fp8": "fast"}, ["wan-animate option fp8='fast'", "auto"]),
    ],
)
def test_every_backend_rejects_bad_options_with_one_error(backend, options, words):
    from newsmotion_engine.render import BackendOptionError

    with pytest.raises(BackendOptionError) as info:
        get_backend(backend, **options)
    assert isinstance(info.value, NewsmotionError)
    for w in words:
        assert w in str(info.value)


@pytest.mark.parametrize(
    "backend, option, words",
    [
        ("warp", "foo=bar", ["unknown warp option(s) foo", "known:"]),
        ("warp", "grid_step=1", ["warp option grid_step=1"]),
        ("wan-animate", "foo=bar", ["unknown wan-animate option(s) foo", "known:"]),
        ("wan-animate", "cfg_every=0", ["wan-animate option cfg_every=0", "every"]),
    ],
)
def test_cli_render_prints_one_error_line_for_bad_options(capsys, backend, option, words):
    from newsmotion_engine.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(["render", "--persona", "astronaut", "--loop", "nod", "--backend", backend, "-o", option])
    out, err = capsys.readouterr()
    assert exit_info.value.code == 1 and "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ")
    for w in words:
        assert w in lines[0]


def test_warp_options_are_typed_and_prepare_is_a_no_op():
    from newsmotion_engine.render.backends.warp.warp import WarpOptions

    backend = get_backend("warp", threads=1, grid_step=8)
    assert backend.options == WarpOptions(threads=1, grid_step=8) and backend.grid_step == 8
    assert backend.prepare_guidance(None, RenderSpec()) is False and backend.prepare_persona(None, RenderSpec()) is False
    assert WarpOptions.from_mapping(WarpOptions(threads=3).as_mapping()) == WarpOptions(threads=3)
