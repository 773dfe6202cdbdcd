"""The keyframe schedule: which frames a backend generates, which are infilled, loops wrapping to
frame 0, clips that do not loop ending on a keyframe."""

import pytest

from newsmotion_engine.errors import InfillError
from newsmotion_engine.video.infill_schedule import keyframe_schedule


def test_schedule_1_to_2_loop_wraps_to_frame_zero():
    s = keyframe_schedule(8, 2)
    assert s.keyframes == (0, 2, 4, 6) and s.infilled == (1, 3, 5, 7)
    assert s.pairs == ((0, 2, 2), (2, 4, 2), (4, 6, 2), (6, 8, 2))  # 8 is the next cycle's frame 0
    assert s.source(0) == (0, 0, 0.0) and s.source(3) == (2, 4, 0.5) and s.source(7) == (6, 8, 0.5)
    assert s.generated_fraction == 0.5


def test_schedule_1_to_3_times_and_short_wrap():
    s = keyframe_schedule(9, 3)
    assert s.keyframes == (0, 3, 6) and s.infilled == (1, 2, 4, 5, 7, 8)
    assert s.source(7) == (6, 9, pytest.approx(1 / 3)) and s.source(8) == (6, 9, pytest.approx(2 / 3))
    # 10 frames at 1:3: keyframe 9 sits next to the next cycle's frame 0 (a wrap gap of 1).
    s10 = keyframe_schedule(10, 3)
    assert s10.keyframes == (0, 3, 6, 9) and s10.pairs[-1] == (9, 10, 1) and 9 not in s10.infilled
    # 11 frames: a wrap gap of 2, one frame infilled half way.
    assert keyframe_schedule(11, 3).source(10) == (9, 11, 0.5)


def test_schedule_without_loop_ends_on_a_keyframe():
    s = keyframe_schedule(11, 3, loop=False)
    assert s.keyframes == (0, 3, 6, 9, 10) and s.pairs[-1] == (9, 10, 1)
    assert keyframe_schedule(10, 3, loop=False).keyframes == (0, 3, 6, 9)
    assert keyframe_schedule(9, 2, loop=False).keyframes == (0, 2, 4, 6, 8)
    assert keyframe_schedule(1, 3, loop=False).keyframes == (0,)
    assert keyframe_schedule(5, 1).infilled == ()


@pytest.mark.parametrize("frames, ratio", [(0, 2), (8, 0), (8, 9), (8.0, 2), (8, True)])
def test_schedule_rejects_bad_arguments(frames, ratio):
    with pytest.raises(InfillError):
        keyframe_schedule(frames, ratio)
