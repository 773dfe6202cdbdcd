"""TeaCache calibration on the tiny preset (CPU, random weights): records every step, fits."""

import json

import numpy as np
import pytest

from newsmotion_engine.cli import main
from newsmotion_engine.errors import NewsmotionError
from newsmotion_engine.persona.sources import install_source
from newsmotion_engine.render import RenderSpec
from newsmotion_engine.render.backends.wan_animate.calibrate import calibrate_teacache

TINY = {"preset": "tiny", "steps": 4, "device": "cpu", "dtype": "float32"}


def test_calibration_records_a_full_run_and_fits(astronaut_png, tmp_path, capsys, storage):
    install_source(storage, astronaut_png, "anchor")
    out = tmp_path / "fit.json"
    argv = ["calibrate", "teacache", "--persona", "anchor", "--loop", "nod", "--width", "64", "--height", "128",
            "--degree", "2", "--json", str(out)] + [f"-o{k}={json.dumps(v)}" for k, v in TINY.items()]  # fmt: skip
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 0
    result = json.loads(out.read_text())
    assert result["degree"] == 2 and len(result["coefficients"]) == 3
    assert result["pairs"] > 2 and "random weights" in result["weights"]
    assert all(np.isfinite(result["coefficients"]))
    assert "teacache_coefficients=" in capsys.readouterr().out


def test_calibration_refuses_a_skipping_run(astronaut_png, storage):
    install_source(storage, astronaut_png, "anchor")
    with pytest.raises(NewsmotionError, match="records a full run"):
        calibrate_teacache(storage, "anchor", "nod", {**TINY, "teacache": 0.15}, RenderSpec(width=64, height=128))


def test_pyramid_calibration_compares_every_frame_with_the_exact_run(astronaut_png, tmp_path, storage):
    install_source(storage, astronaut_png, "anchor")
    out = tmp_path / "pyramid.json"
    argv = ["calibrate", "pyramid", "--persona", "anchor", "--loop", "nod", "--width", "64", "--height", "128",
            "--values", "1", "--json", str(out)] + [f"-o{k}={json.dumps(v)}" for k, v in {**TINY, "steps": 2}.items()]  # fmt: skip
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 0
    result = json.loads(out.read_text())
    run = result["runs"]["pyramid_low_steps=1"]
    assert result["calibration"] == "pyramid" and "random weights" in result["weights"]
    assert run["frames"] == 120 and 0 < run["ssim"] <= 1 and run["psnr_db"] > 0 and run["speedup_vs_exact"] > 0


@pytest.mark.parametrize(("name", "options", "match"), [
    ("pyramid", {"pyramid_low_steps": 1}, "leave pyramid_low_steps out"),
    ("blur", {}, "unknown approximation"),
])  # fmt: skip
def test_approximation_calibration_refuses_bad_requests(storage, name, options, match):
    from newsmotion_engine.render.backends.wan_animate.calibrate import calibrate_approximation

    with pytest.raises(NewsmotionError, match=match):
        calibrate_approximation(storage, "anchor", "nod", {**TINY, **options}, RenderSpec(width=64, height=128),
                                approximation=name, values=[1])  # fmt: skip


def test_a_bad_value_is_refused_before_any_render(astronaut_png, storage, monkeypatch):
    """``--values`` words reach the backend's option parser: a value it refuses stops the
    calibration before the exact run, naming the option."""
    from newsmotion_engine.render import job
    from newsmotion_engine.render.backends.wan_animate.calibrate import calibrate_approximation

    install_source(storage, astronaut_png, "anchor")
    monkeypatch.setattr(job, "render_persona_loop", lambda *a, **k: pytest.fail("rendered before the values were checked"))
    with pytest.raises(NewsmotionError, match="pyramid_low_steps='abc'"):
        calibrate_approximation(storage, "anchor", "nod", dict(TINY), RenderSpec(width=64, height=128),
                                approximation="pyramid", values=["abc"])  # fmt: skip


def _calibrate_cli(name, opts, out):
    """``newsmotion calibrate NAME`` on anchor x nod at 64x128 with ``opts`` as ``-o`` flags: exits 0;
    the JSON it wrote to ``out``."""
    argv = ["calibrate", name, "--persona", "anchor", "--loop", "nod", "--width", "64", "--height", "128",
            "--json", str(out)] + [f"-o{k}={json.dumps(v)}" for k, v in opts.items()]  # fmt: skip
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 0
    return json.loads(out.read_text())


def test_fit_segments_calibration_renders_both_lengths_and_says_how_to_judge(astronaut_png, tmp_path, capsys, storage):
    """wan-animate-2 at 81-frame segments vs fit_segments (2 x 61 for the 120-frame loop): both
    clips whole, the fitted one faster, pose fidelity per run, and the note that PSNR against the
    default run is not the judge (another generation length is another sample)."""
    pytest.importorskip("diffusers")
    install_source(storage, astronaut_png, "anchor")
    out = tmp_path / "fit.json"
    opts = {"preset": "tiny", "steps": 1, "device": "cpu", "dtype": "float32", "segment_frames": 81}
    result = _calibrate_cli("fit-segments", opts, out)
    exact, fitted = result["runs"]["exact"], result["runs"]["fit_segments=True"]
    assert result["backend"] == "wan-animate-2" and "random weights" in result["weights"]
    assert fitted["frames"] == 120 and 0 < fitted["ssim"] <= 1 and fitted["speedup_vs_exact"] > 0
    assert all({"pose_pck_body", "motion_energy_ratio", "pose_fidelity_reason"} <= run.keys() for run in (exact, fitted))
    assert "not by PSNR" in result["judge_by"] and "judge by" in capsys.readouterr().out


def test_teacache_calibration_of_wan_animate_2_records_its_base_schedule(astronaut_png, tmp_path, storage):
    """The same recording and fit on wan-animate-2's base schedule (CFG: cond and uncond pairs
    recorded apart); its distilled schedule is refused with the reason."""
    pytest.importorskip("diffusers")
    install_source(storage, astronaut_png, "anchor")
    opts = {"preset": "tiny", "steps": 4, "device": "cpu", "dtype": "float32", "schedule": "base", "segment_frames": 81}
    result = calibrate_teacache(storage, "anchor", "nod", opts, RenderSpec(width=64, height=128), degree=2, backend_name="wan-animate-2")
    # 2 segments x 2 contexts x 3 steps after each context's first call.
    assert result["backend"] == "wan-animate-2" and result["pairs"] == 12 and len(result["coefficients"]) == 3
    assert all(np.isfinite(result["coefficients"])) and "random weights" in result["weights"]
    with pytest.raises(NewsmotionError, match="needs the base schedule"):
        calibrate_teacache(storage, "anchor", "nod", {**opts, "schedule": "distilled"}, RenderSpec(width=64, height=128),
                           backend_name="wan-animate-2")  # fmt: skip
    with pytest.raises(NewsmotionError, match="has no TeaCache"):
        calibrate_teacache(storage, "anchor", "nod", {}, RenderSpec(width=64, height=128), backend_name="warp")


def test_cudnn_attention_calibration_compares_it_with_the_default_attention(astronaut_png, tmp_path, monkeypatch, storage):
    """``calibrate cudnn-attention``: the default render, then attention=fp8-cudnn, compared frame
    by frame. The cuDNN ops run their CPU kernels here (the same FP8 arithmetic as the graph)."""
    pytest.importorskip("diffusers")
    from newsmotion_engine.accel import attention_cudnn

    monkeypatch.setattr(attention_cudnn, "cudnn_fp8_supported", lambda device=None: (True, "CPU kernels (test)"))
    install_source(storage, astronaut_png, "anchor")
    out = tmp_path / "cudnn.json"
    opts = {"preset": "tiny", "steps": 1, "device": "cpu", "dtype": "float32"}
    result = _calibrate_cli("cudnn-attention", opts, out)
    run = result["runs"]["attention=fp8-cudnn"]
    assert result["backend"] == "wan-animate-2" and result["values"] == ["fp8-cudnn"]
    assert run["frames"] == 120 and 0 < run["ssim"] <= 1 and run["psnr_db"] > 0
