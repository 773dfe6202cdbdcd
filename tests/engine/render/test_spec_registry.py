"""RenderSpec validation and the backend registry."""

from __future__ import annotations

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
