"""mediapipe's native start-up lines are dropped from fd 2; everything else written meanwhile is
kept, and overlapping users restore fd 2 correctly."""

import os
import sys
import threading

import pytest

from newsmotion_engine.nativelog import filter_native_stderr, is_noise

NOISE_LINES = [
    "INFO: Created TensorFlow Lite XNNPACK delegate for CPU.\n",
    "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n",
    "W0000 00:00:1796111893.914363    5458 inference_feedback_manager.cc:114] Feedback manager requires a model "
    "with a single signature inference. Disabling support for feedback tensors.\n",
    "W0000 00:00:1796111894.067953    5459 landmark_projection_calculator.cc:186] Using NORM_RECT without "
    "IMAGE_DIMENSIONS is only supported for the square ROI. Provide IMAGE_DIMENSIONS or use PROJECTION_MATRIX.\n",
]


@pytest.mark.parametrize("line", NOISE_LINES)
def test_known_lines_are_noise(line):
    assert is_noise(line)


@pytest.mark.parametrize("line", [
    "E0000 00:00:1796111894.067953    5459 calculator_graph.cc:887] INTERNAL: something broke\n",
    "W0000 00:00:1796111894.067953    5459 other_calculator.cc:1] a new warning\n",
    "Traceback (most recent call last):\n",
    "INFO: Created TensorFlow Lite XNNPACK delegate for CPU. and more\n",
])  # fmt: skip
def test_other_lines_are_kept(line):
    assert not is_noise(line)


def test_filter_drops_noise_and_keeps_the_rest(capfd):
    with filter_native_stderr():
        for line in NOISE_LINES:
            os.write(2, line.encode())
        os.write(2, b"E0000 native error worth seeing\n")
        print("python warning", file=sys.stderr)
    out, err = capfd.readouterr()
    # (pytest's capfd also swaps sys.stderr, so the two lines' order is not the terminal's)
    assert sorted(err.splitlines()) == ["E0000 native error worth seeing", "python warning"]
    os.write(2, b"after\n")  # fd 2 is back
    assert capfd.readouterr().err == "after\n"


def test_an_exception_restores_stderr(capfd):
    with pytest.raises(RuntimeError):
        with filter_native_stderr():
            os.write(2, NOISE_LINES[0].encode())
            raise RuntimeError("boom")
    os.write(2, b"visible\n")
    assert capfd.readouterr().err == "visible\n"


def test_overlapping_users_that_do_not_nest(capfd):
    """Two detectors whose lives interleave (A starts, B starts, A ends, B ends): fd 2 stays
    captured until the last one ends, then returns to the real stderr."""
    a_entered, b_entered, a_done = threading.Event(), threading.Event(), threading.Event()

    def a():
        with filter_native_stderr():
            a_entered.set()
            b_entered.wait()
            os.write(2, NOISE_LINES[0].encode())
        a_done.set()

    thread = threading.Thread(target=a)
    thread.start()
    a_entered.wait()
    with filter_native_stderr():
        b_entered.set()
        a_done.wait()
        os.write(2, NOISE_LINES[1].encode() + b"from b\n")
    thread.join()
    os.write(2, b"after both\n")
    assert capfd.readouterr().err == "from b\nafter both\n"


def test_detector_lifetime_is_quiet(capfd):
    """A real holistic graph: its worker threads log after the constructor returns; nothing
    reaches stderr over the detector's life."""

    from newsmotion_engine.guidance.holistic import HolisticDetector
    from newsmotion_engine.samples import astronaut_rgb

    with HolisticDetector(static_image_mode=False) as det:
        det.detect(astronaut_rgb())
    assert capfd.readouterr().err == ""
