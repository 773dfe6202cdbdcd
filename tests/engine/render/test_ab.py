"""run_ab renders the same clips, telemetry and comparison whatever its concurrency (serial, two
threads / CUDA streams, two child processes), records how it ran, and fails as a whole with the
failing side's error; run_sides really overlaps the two sides when asked to."""

from __future__ import annotations

import json
import shutil

import pytest
from PIL import Image
from skimage import data

from newsmotion_engine.errors import BadInputError, NewsmotionError
from newsmotion_engine.persona.sources import install_source
from newsmotion_engine.render import RenderSpec
from newsmotion_engine.render.ab import CONCURRENCY_MODES, ABSide, choose_concurrency, run_ab, run_sides
from newsmotion_engine.render.fidelity import FidelityConfig
from newsmotion_engine.render.job import ensure_render_inputs
from newsmotion_engine.render.telemetry import RenderTelemetry
from newsmotion_engine.storage import Storage
from newsmotion_engine.video.compare import compare_videos
from tests.engine.render.ab_sides import Loaded, Sleeper

SPEC = RenderSpec(width=90, height=160)
NO_FIDELITY = FidelityConfig(enabled=False)  # mediapipe on every clip would triple the test's time
A, B = ABSide("a", "warp"), ABSide("b", "warp", {"margin": 0.1})


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Storage:
    """A storage with loop "nod" and persona "anchor" (the astronaut at 256 px: a quicker build)
    built once for the module."""
    store = Storage(tmp_path_factory.mktemp("ab-storage"))
    portrait = tmp_path_factory.mktemp("ab-portrait") / "anchor.png"
    Image.fromarray(data.astronaut()).resize((256, 256)).save(portrait)
    install_source(store, portrait, "anchor")
    ensure_render_inputs(store, "anchor", "nod")
    return store


@pytest.fixture()
def anchor(storage, built) -> Storage:
    """This test's storage holding a copy of the built caches."""
    shutil.copytree(built.root, storage.root, dirs_exist_ok=True)
    return storage


def ab(store: Storage, mode: str, **kw):
    return run_ab(store, "anchor", "nod", A, B, SPEC, concurrency=mode, fidelity=NO_FIDELITY, **kw)


def test_every_mode_gives_the_same_clips_telemetry_and_comparison(anchor, tmp_path):
    first = ab(anchor, "serial")
    kept = {label: shutil.copy(path, tmp_path / f"serial-{label}.mp4") for label, path in first.clips.items()}
    reference = json.loads(first.path.read_text())
    for mode in CONCURRENCY_MODES:
        result = first if mode == "serial" else ab(anchor, mode, force=True)
        assert {t.outcome for t in result.telemetry.values()} == {"rendered"}
        for label, path in result.clips.items():
            again = compare_videos(kept[label], path)
            assert again.summary()["identical_frames"] == 120, (mode, label)  # decoded frame for frame the same
            assert RenderTelemetry.read(path.with_suffix(".json")).input_digest == first.telemetry[label].input_digest
        record = json.loads(result.path.read_text())
        assert record["per_frame"] == reference["per_frame"]
        assert record["summary"]["identical_frames"] < 120  # the two sides do differ
        ran = record["concurrency"]
        assert ran["mode"] == mode and ran == result.timing.as_dict()
        assert set(ran["sides"]) == {"a", "b"} and all(s["render_s"] > 0 for s in ran["sides"].values())
        assert ran["wall_s"] >= ran["render_wall_s"] > 0
        if mode == "serial":
            assert ran["render_wall_s"] == pytest.approx(sum(s["render_s"] for s in ran["sides"].values()), abs=0.01)
        else:  # both ran at once: the rendering took at least as long as the slower side
            assert ran["render_wall_s"] >= max(s["render_s"] for s in ran["sides"].values())


def test_a_failing_side_fails_the_ab_with_its_error_and_no_comparison(anchor):
    # In a child process; the other modes' failures are run_sides' tests below.
    out = anchor.ab_dir("anchor", "nod")
    ab(anchor, "serial")
    (out / "b.mp4").unlink()
    (out / "b.mp4").mkdir()  # side b cannot write its clip
    with pytest.raises(BadInputError, match=r"^A/B side 'b': .*b\.mp4: output path is a folder"):
        ab(anchor, "processes", force=True)
    # Side a was rendered again, so the old comparison no longer described the clips: removed.
    assert not (out / "comparison.json").exists()
    assert (out / "a.mp4").is_file() and sorted(p.name for p in out.iterdir() if p.name.startswith(".")) == [".a.mp4.lock", ".b.mp4.lock"]


def test_bad_requests_are_refused_before_anything_runs(anchor):
    out = anchor.ab_dir("anchor", "nod")
    with pytest.raises(BadInputError, match="concurrency 'threads': use auto or one of serial, streams, processes"):
        ab(anchor, "threads")
    with pytest.raises(NewsmotionError, match="margin"):
        run_ab(anchor, "anchor", "nod", A, ABSide("b", "warp", {"margin": -1}), SPEC, concurrency="processes")
    with pytest.raises(NewsmotionError, match="unknown persona"):
        run_ab(anchor, "nobody", "nod", A, B, SPEC, concurrency="processes")
    assert not out.exists()


# ------------------------------------------------------------------ run_sides with stand-in sides
@pytest.mark.parametrize("mode", CONCURRENCY_MODES)
def test_sides_overlap_only_when_run_concurrently_and_a_bug_fails_its_side_only(mode):
    run = run_sides([Sleeper("a"), Sleeper("b", fail_run=True)], mode)  # each side sleeps 0.3 s
    start, end = run.results["a"]
    assert end - start >= 0.3 and set(run.results) == {"a"}
    if mode == "serial":
        assert run.timing.render_wall_s >= 0.6
    else:
        assert run.timing.render_wall_s < 0.55  # the two sleeps overlapped
    assert type(run.errors["b"]) is RuntimeError  # not a NewsmotionError: a bug, with its class named
    assert str(run.errors["b"]).startswith("A/B side 'b': a bug in the render (ZeroDivisionError)")
    with pytest.raises(RuntimeError, match="A/B side 'b'"):
        run.raise_failure(["a", "b"])


@pytest.mark.parametrize("mode", CONCURRENCY_MODES)
def test_a_side_that_cannot_load_keeps_its_error_class_and_the_other_does_not_render(mode):
    run = run_sides([Sleeper("a", fail_setup=True), Sleeper("b")], mode)
    assert set(run.errors) == {"a"} and isinstance(run.errors["a"], BadInputError)
    assert str(run.errors["a"]) == "A/B side 'a': a: cannot load"
    assert not run.results


def test_a_child_that_dies_is_a_failed_side():
    run = run_sides([Sleeper("a"), Sleeper("b", die=True)], "processes")
    assert set(run.results) == {"a"}
    assert "A/B side 'b': its process ended (exit code 3) while rendering" in str(run.errors["b"])


def test_streams_render_each_side_on_its_own_cuda_stream():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")

    class OnCuda(Loaded):
        components = type("Components", (), {"device": torch.device("cuda")})()

    class StreamSide:
        def __init__(self, label):
            self.label = label

        def setup(self):
            return OnCuda()

        def run(self, backend):
            return torch.cuda.current_stream().cuda_stream

    run = run_sides([StreamSide("a"), StreamSide("b")], "streams")
    default = torch.cuda.default_stream().cuda_stream
    assert len({run.results["a"], run.results["b"], default}) == 3


def test_auto_shares_the_gpu_only_between_light_sides():
    """Two light models measured 1.065x on two streams; two that each fill the GPU gain nothing and
    would hold both models at once (two 14B models do not fit an 80 GB card): serial."""
    echo = ABSide("echo", "echomimic-v3", {"speech": "intro"})
    small = ABSide("small", "wan-animate-2", {"preset": "1.3b"})
    assert choose_concurrency(echo, small) == "streams"
    assert choose_concurrency(A, B) == "streams"  # warp runs on the CPU
    assert choose_concurrency(ABSide("v1", "wan-animate"), ABSide("v2", "wan-animate-2")) == "serial"  # the released 14B models
    assert choose_concurrency(echo, ABSide("big", "wan-animate-2", {"preset": "1.3b", "model_path": "/models/x"})) == "serial"
    assert choose_concurrency(echo, ABSide("m", "mimicmotion")) == "serial"  # not measured: the safe choice


def test_auto_records_the_mode_it_chose(anchor):
    result = run_ab(anchor, "anchor", "nod", A, B, SPEC, concurrency="auto", fidelity=NO_FIDELITY, force=True)
    assert result.timing.mode == "streams"
    assert json.loads(result.path.read_text())["concurrency"]["mode"] == "streams"
