"""The rig: the rest pose through forward kinematics is the pose every loop starts in."""

import numpy as np

from newsmotion_engine import skeleton as sk
from newsmotion_engine.guidance.choreography import author_loop
from newsmotion_engine.guidance.rig import FRAME_HEIGHT, FRAME_WIDTH, PARAMS, REST, pose


def test_rest_pose_is_every_loops_first_frame():
    # At phase 0 the idle layers are zero (no breath, drift or blink), so a loop's first frame is
    # the rig's REST pose itself.
    params = {name: np.full(1, value) for name, value in REST.items()} | {"breath": np.zeros(1)}
    kp = pose(params)
    assert kp.shape == (1, sk.NUM_KEYPOINTS, 3) and tuple(REST) == PARAMS
    kp[..., :2] /= [FRAME_WIDTH, FRAME_HEIGHT]
    kp[:, 13:23, :2] = 0.0
    np.testing.assert_allclose(kp[0], author_loop("nod")[0], atol=1e-6)
    # Waist up: knees, ankles and feet have no confidence; the person's left is on the image right.
    assert (kp[0, 13:23, 2] == 0).all() and (kp[0, :13, 2] == 1).all()
    assert kp[0, sk.BODY["left_shoulder"], 0] > kp[0, sk.BODY["right_shoulder"], 0]
