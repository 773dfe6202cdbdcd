"""Tier 1, kinematics: the canonical skeleton's motion loops and what is derived from them.

``palette`` authors the canonical loops, ``draw`` renders DWPose-style pose maps, and the
extraction/cache modules turn driving videos into keypoints and store them.
"""
