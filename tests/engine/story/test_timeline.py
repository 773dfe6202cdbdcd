"""The timeline planner: slots and idle fill, and joins without a pop (measured)."""

import numpy as np
import pytest

from newsmotion_engine.errors import NewsmotionError
from newsmotion_engine.story.timeline import Slot, blend_length, join_smoothness, joint_jumps, plan_timeline

CANVAS = (720, 1280)


def rest_pose() -> np.ndarray:
    rng = np.random.default_rng(0)
    kp = np.zeros((133, 3), np.float32)
    kp[:, :2] = rng.uniform(0.3, 0.7, (133, 2))
    kp[:, 2] = 1.0
    return kp


def swing(frames: int, amplitude: float) -> np.ndarray:
    """A seamless loop that starts at rest: every joint moves right and back by ``amplitude``
    (normalized x), fastest mid-way."""
    phase = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(frames) / frames)
    kp = np.repeat(rest_pose()[None], frames, axis=0)
    kp[:, :, 0] += (amplitude * phase)[:, None]
    return kp


def still(frames: int = 40) -> np.ndarray:
    return np.repeat(rest_pose()[None], frames, axis=0)


def test_slots_and_idle_cover_the_clip():
    slots = [Slot("a", 10, 40, "gestures[0]"), Slot("b", 60, 100, "gestures[1]", fit="once")]
    tl = plan_timeline(slots, total_frames=120, loops={"a": swing(60, 0.1), "b": swing(30, 0.1)}, idle=still(), max_blend_frames=0)
    spans = [(p.kind, p.loop_id, p.start, p.stop) for p in tl.parts]
    assert spans == [("idle", "rest", 0, 10), ("gesture", "a", 10, 40), ("idle", "rest", 40, 60),
                     ("gesture", "b", 60, 90), ("idle", "rest", 90, 120)]  # fmt: skip
    assert tl.keypoints.shape == (120, 133, 3)
    # "a" starts at its own frame 0 in its slot; "b" plays once (30 frames) and idle takes over.
    np.testing.assert_array_equal(tl.keypoints[10:40], swing(60, 0.1)[:30])
    np.testing.assert_array_equal(tl.keypoints[60:90], swing(30, 0.1))


def test_a_loop_repeats_to_fill_a_longer_slot():
    loop = swing(20, 0.1)
    tl = plan_timeline([Slot("a", 0, 50, "gestures[0]")], total_frames=50, loops={"a": loop}, idle=still())
    np.testing.assert_array_equal(tl.keypoints, loop[np.arange(50) % 20])


def test_a_cut_mid_gesture_is_blended_below_the_loops_own_speed():
    # Slot of 30 frames of a 60-frame swing: the cut lands at the swing's widest point.
    loops = {"a": swing(60, 0.2)}
    slots = [Slot("a", 20, 50, "gestures[0]")]
    cut = plan_timeline(slots, total_frames=100, loops=loops, idle=still(), max_blend_frames=0)
    blended = plan_timeline(slots, total_frames=100, loops=loops, idle=still(), max_blend_frames=45)
    hard = join_smoothness(cut, CANVAS)
    smooth = join_smoothness(blended, CANVAS)
    own_top = joint_jumps(loops["a"], CANVAS).max()
    assert hard["max_jump_at_joins_px"] > 10 * own_top  # a cut pops: the whole 144 px swing in one frame
    assert smooth["max_jump_at_joins_px"] <= own_top  # a blend moves no faster than the loop itself
    out_of_a = blended.parts[2]
    assert out_of_a.blend_before > 0 and out_of_a.blend_after > 0  # centred on the join
    # Outside the window, the loop plays untouched.
    np.testing.assert_array_equal(blended.keypoints[20 : 50 - out_of_a.blend_before], loops["a"][: 30 - out_of_a.blend_before])


def test_a_join_between_rest_poses_is_a_plain_cut():
    tl = plan_timeline([Slot("a", 10, 70, "gestures[0]")], total_frames=90, loops={"a": swing(60, 0.2)}, idle=still())
    assert [p.blend for p in tl.parts] == [0, 0, 0]


def test_blend_length_grows_with_the_gap():
    assert blend_length(0.0, 10.0, 45) == 0
    assert blend_length(100.0, 10.0, 45) == 29
    assert blend_length(1000.0, 10.0, 45) == 45


def test_overlapping_or_outside_slots_are_refused():
    loops = {"a": swing(20, 0.1)}
    with pytest.raises(NewsmotionError, match=r"gestures\[1\] starts at frame 15, inside gestures\[0\]"):
        plan_timeline([Slot("a", 0, 20, "gestures[0]"), Slot("a", 15, 30, "gestures[1]")], total_frames=40, loops=loops, idle=still())
    with pytest.raises(NewsmotionError, match="not inside the clip"):
        plan_timeline([Slot("a", 30, 50, "gestures[0]")], total_frames=40, loops=loops, idle=still())
    with pytest.raises(NewsmotionError, match="no keypoints given for loop 'b'"):
        plan_timeline([Slot("b", 0, 10, "gestures[0]")], total_frames=40, loops=loops, idle=still())
