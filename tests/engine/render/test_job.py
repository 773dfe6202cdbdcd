"""render_persona_loop only loads caches (and says what to build), skips unchanged renders, and
ensure_render_inputs builds what is missing as visible steps through the cache builders."""

import json

import numpy as np
import pytest
from PIL import Image

from newsmotion_engine.errors import CacheNotReadyError, NewsmotionError
from newsmotion_engine.guidance.cache import ensure_guidance
from newsmotion_engine.persona.build import ensure_persona
from newsmotion_engine.persona.sources import install_source
from newsmotion_engine.render import RenderSpec, get_backend
from newsmotion_engine.render.job import (
    RenderInputs,
    backend_identity,
    ensure_render_inputs,
    input_digest,
    load_render_inputs,
    render_persona_loop,
)
from newsmotion_engine.render.telemetry import RenderTelemetry

SPEC = RenderSpec(width=180, height=320)


@pytest.fixture()
def warp():
    backend = get_backend("warp")
    backend.load()
    yield backend
    backend.close()


@pytest.fixture()
def anchor(storage, astronaut_png):
    install_source(storage, astronaut_png, "anchor")
    return storage


def test_render_never_builds_and_names_what_to_build(anchor, warp):
    storage = anchor
    with pytest.raises(CacheNotReadyError) as info:
        render_persona_loop(storage, "anchor", "nod", warp, SPEC)
    assert str(info.value) == (
        "guidance cache for loop 'nod' is missing: materialize guidance_cache[nod] or run `newsmotion guidance build nod`"
    )
    ensure_guidance(storage, "nod")
    with pytest.raises(CacheNotReadyError, match=r"persona cache for 'anchor' is missing: materialize persona_cache\[anchor\] "
                       r"or run `newsmotion persona build anchor`"):  # fmt: skip
        render_persona_loop(storage, "anchor", "nod", warp, SPEC)
    assert not storage.renders_root.exists() and not storage.persona_dir("anchor").exists()

    ensure_persona(storage, "anchor")
    tele = render_persona_loop(storage, "anchor", "nod", warp, SPEC)
    assert tele.outcome == "rendered" and (tele.guidance_cache, tele.persona_cache) == ("hit", "hit")
    assert RenderTelemetry.read(storage.render_path("anchor", "nod", "warp").with_suffix(".json")) == tele


def test_corrupt_and_stale_caches_are_refused_not_rebuilt(anchor, warp):
    storage = anchor
    ensure_render_inputs(storage, "anchor", "nod")
    kp = storage.guidance_dir("nod") / "keypoints.npy"
    truncated = kp.read_bytes()[:-100]
    kp.write_bytes(truncated)
    with pytest.raises(CacheNotReadyError, match="guidance cache for loop 'nod' is corrupt .*truncated"):
        render_persona_loop(storage, "anchor", "nod", warp, SPEC)
    assert kp.read_bytes() == truncated  # left as it was: the render did not rebuild it

    ensure_guidance(storage, "nod")
    meta_path = storage.persona_dir("anchor") / "metadata.json"
    meta = json.loads(meta_path.read_text())
    meta["params"]["version"] = -1
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(CacheNotReadyError, match="persona cache for 'anchor' is stale"):
        render_persona_loop(storage, "anchor", "nod", warp, SPEC)


def test_unchanged_render_is_skipped_until_an_input_changes(anchor, warp, tmp_path):
    storage = anchor
    ensure_render_inputs(storage, "anchor", "nod")
    first = render_persona_loop(storage, "anchor", "nod", warp, SPEC)
    mp4 = storage.render_path("anchor", "nod", "warp")
    stamp = mp4.stat().st_mtime_ns

    again = render_persona_loop(storage, "anchor", "nod", warp, SPEC)
    assert again.outcome == "skipped" and again.input_digest == first.input_digest
    assert again.created_at == first.created_at and mp4.stat().st_mtime_ns == stamp

    forced = render_persona_loop(storage, "anchor", "nod", warp, SPEC, force=True)
    assert forced.outcome == "rendered" and forced.input_digest == first.input_digest

    other_seed = render_persona_loop(storage, "anchor", "nod", warp, RenderSpec(width=180, height=320, seed=1))
    assert other_seed.outcome == "rendered" and other_seed.input_digest != first.input_digest

    # A new portrait for the persona: its cache (and digest) changes, so the render is redone.
    flipped = tmp_path / "flipped.png"
    Image.open(storage.find_persona_source("anchor")).transpose(Image.Transpose.FLIP_LEFT_RIGHT).save(flipped)
    old_persona = load_render_inputs(storage, "anchor", "nod").persona.digest
    install_source(storage, flipped, "anchor")
    with pytest.raises(CacheNotReadyError, match="stale"):
        load_render_inputs(storage, "anchor", "nod")
    _, built = ensure_persona(storage, "anchor")
    assert built
    inputs = load_render_inputs(storage, "anchor", "nod")
    assert inputs.persona.digest != old_persona
    redone = render_persona_loop(storage, "anchor", "nod", warp, RenderSpec(width=180, height=320, seed=1))
    assert redone.outcome == "rendered" and redone.provenance.persona_digest == inputs.persona.digest
    assert redone.input_digest != other_seed.input_digest


def test_ensure_render_inputs_builds_missing_caches_as_visible_steps(anchor, warp):
    storage = anchor
    steps, updates = [], []

    def on_step(label):
        steps.append(label)
        return lambda done, total: updates.append((label, done, total))

    inputs = ensure_render_inputs(storage, "anchor", "nod", warp, SPEC, on_step=on_step)
    assert steps == ["building guidance cache nod", "building persona cache anchor"]  # warp has no sub-caches
    assert {label for label, _, _ in updates} == set(steps)
    assert all(any(d == t for label, d, t in updates if label == s) for s in steps)  # each step completes
    assert (inputs.guidance_state, inputs.persona_state) == ("built", "built")
    tele = render_persona_loop(storage, "anchor", "nod", warp, SPEC, inputs=inputs)
    assert (tele.guidance_cache, tele.persona_cache) == ("built", "built")

    steps.clear()
    inputs = ensure_render_inputs(storage, "anchor", "nod", warp, SPEC, on_step=on_step)
    assert steps == [] and (inputs.guidance_state, inputs.persona_state) == ("hit", "hit")
    with pytest.raises(ValueError, match="inputs are for anchor x nod"):
        render_persona_loop(storage, "anchor", "welcome", warp, SPEC, inputs=inputs)


def test_backend_artifacts_are_prepared_through_the_backend(anchor, warp):
    """A backend with sub-caches gets prepare_guidance / prepare_persona called, announced once."""
    storage = anchor
    calls = []

    class WithSubcaches:
        name = "subby"
        needs = type(warp.needs)(guidance=frozenset({"keypoints", "pose_latents"}), persona=frozenset())

        def prepare_guidance(self, guidance, spec):
            calls.append(("guidance", guidance.loop_id, spec.size))

        def prepare_persona(self, persona, spec):
            calls.append(("persona", persona.persona_id, spec.size))

    steps = []
    ensure_render_inputs(storage, "anchor", "nod", WithSubcaches(), SPEC, on_step=lambda label: steps.append(label) or (lambda d, t: None))
    assert calls == [("guidance", "nod", (180, 320)), ("persona", "anchor", (180, 320))]
    assert steps[-1] == "building subby artifacts"


def test_input_digest_covers_caches_backend_and_spec(anchor):
    storage = anchor
    inputs: RenderInputs = ensure_render_inputs(storage, "anchor", "nod")
    welcome = ensure_render_inputs(storage, "anchor", "welcome")
    a, b = get_backend("warp"), get_backend("warp", grid_step=8)
    base = input_digest(inputs.guidance, inputs.persona, a, SPEC)
    assert base == input_digest(inputs.guidance, inputs.persona, get_backend("warp"), SPEC)
    assert base != input_digest(welcome.guidance, inputs.persona, a, SPEC)
    assert base != input_digest(inputs.guidance, inputs.persona, b, SPEC)
    assert base != input_digest(inputs.guidance, inputs.persona, a, RenderSpec(width=180, height=320, background="#000000"))
    assert base != input_digest(inputs.guidance, inputs.persona, a, RenderSpec(width=180, height=320, fps=25))

    class Reporting:
        name = "reporting"

        def __init__(self, load_s):
            self.load_s = load_s

        def describe(self):
            return {"weights": "none", "accel_report": {"load_s": self.load_s}, "last_render": {"s": self.load_s}}

    assert backend_identity(Reporting(1.0)) == {"weights": "none"}
    one = input_digest(inputs.guidance, inputs.persona, Reporting(1.0), SPEC)
    assert one == input_digest(inputs.guidance, inputs.persona, Reporting(2.0), SPEC)


def test_unknown_loop_and_persona_fail_before_any_work(anchor, warp):
    storage = anchor
    with pytest.raises(NewsmotionError, match="unknown loop 'moonwalk'"):
        render_persona_loop(storage, "anchor", "moonwalk", warp, SPEC)
    with pytest.raises(NewsmotionError, match="unknown persona 'nobody'"):
        render_persona_loop(storage, "nobody", "nod", warp, SPEC)
    with pytest.raises(NewsmotionError, match="invalid persona id"):
        render_persona_loop(storage, "../x", "nod", warp, SPEC)
    assert not storage.guidance_root.exists() and not storage.renders_root.exists()


def test_a_driving_video_is_hashed_once_per_render(anchor, warp, monkeypatch):
    from newsmotion_engine import cachedir
    from newsmotion_engine.samples import write_moving_photo_video

    storage = anchor
    storage.driving_dir.mkdir(parents=True)
    write_moving_photo_video(storage.driving_dir / "sway.mp4", frames=6, width=180, height=320)
    inputs = ensure_render_inputs(storage, "anchor", "sway")
    hashed = []
    real = cachedir.sha256_file
    monkeypatch.setattr(cachedir, "sha256_file", lambda path, *a, **k: hashed.append(path.name) or real(path, *a, **k))
    tele = render_persona_loop(storage, "anchor", "sway", warp, SPEC)
    assert tele.frames == inputs.guidance.frames
    assert hashed.count("sway.mp4") == 1 and hashed.count("anchor.png") == 1
    hashed.clear()
    ensure_render_inputs(storage, "anchor", "sway")  # the CLI's path: one hash each, then render with these inputs
    assert hashed.count("sway.mp4") == 1 and hashed.count("anchor.png") == 1
    assert np.asarray(inputs.guidance.keypoints).shape[0] == 6


def test_a_persona_cache_without_its_portrait_still_renders(anchor, warp):
    storage = anchor
    ensure_render_inputs(storage, "anchor", "nod")
    storage.find_persona_source("anchor").unlink()  # e.g. built before sources were kept
    inputs = ensure_render_inputs(storage, "anchor", "nod")
    assert inputs.persona_state == "hit"
    assert render_persona_loop(storage, "anchor", "nod", warp, SPEC).outcome == "rendered"
    storage.persona_dir("anchor").joinpath("landmarks.npy").write_bytes(b"")
    with pytest.raises(CacheNotReadyError, match="persona cache for 'anchor' is corrupt.*persona add IMAGE --id anchor"):
        ensure_render_inputs(storage, "anchor", "nod")


def test_a_record_from_before_pose_fidelity_is_rendered_again_and_measured(anchor, warp):
    from newsmotion_engine.render.fidelity import FidelityConfig

    storage = anchor
    ensure_render_inputs(storage, "anchor", "nod")
    off = render_persona_loop(storage, "anchor", "nod", warp, SPEC, fidelity=FidelityConfig(enabled=False))
    assert off.pose_fidelity is None and off.pose_fidelity_reason.startswith("turned off")
    json_path = storage.render_path("anchor", "nod", "warp").with_suffix(".json")
    data = json.loads(json_path.read_text())
    data["schema_version"] = 1
    for key in ("pose_fidelity", "pose_fidelity_reason"):
        data.pop(key)
    json_path.write_text(json.dumps(data))
    again = render_persona_loop(storage, "anchor", "nod", warp, SPEC, fidelity=FidelityConfig(stride=30))
    assert again.outcome == "rendered" and again.pose_fidelity is not None
    assert again.pose_fidelity.frames_compared == 4 and again.pose_fidelity.stride == 30
    assert render_persona_loop(storage, "anchor", "nod", warp, SPEC).outcome == "skipped"


def test_a_speech_option_names_a_speech_of_the_storage(storage):
    from newsmotion_engine.render.job import storage_backend_options

    given = {"speech": "hello", "steps": 2}
    assert storage_backend_options(storage, given) == {"speech": "hello", "steps": 2, "speech_root": str(storage.speech_root)}
    assert given == {"speech": "hello", "steps": 2}  # the caller's mapping is left as it was
    assert storage_backend_options(storage, {"speech": "hello", "speech_root": "/elsewhere"})["speech_root"] == "/elsewhere"
    assert storage_backend_options(storage, {"threads": 2}) == {"threads": 2}
