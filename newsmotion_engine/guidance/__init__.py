"""Tier 1, kinematics: the canonical skeleton's motion loops and what is derived from them.

``catalogue`` lists the canonical loops, ``choreography`` authors them on the ``rig``, ``draw``
renders DWPose-style pose maps, and the extraction/cache modules turn driving videos into keypoints
and store them.
"""
