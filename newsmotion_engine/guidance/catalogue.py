"""The catalogue of canonical motion loops: which loops exist and what each one shows.

Seven loops (``LOOP_IDS``): welcome, breaking_alert, left_gesture, right_gesture, deep_thought,
nod, signoff. Each has a title, a description of its motion and a text prompt for the diffusion
backends that take one. How a loop's poses are made: :mod:`newsmotion_engine.guidance.choreography`
(keyframes performed by the body of :mod:`newsmotion_engine.guidance.rig`).

Sides: "left" is the *person's* left, as in the skeleton. The anchor faces the camera, so the
person's left arm is on the **image's right** (larger x); ``left_gesture`` presents toward the
right of the frame, ``right_gesture`` toward the left.

Example::

    from newsmotion_engine.guidance.catalogue import canonical_loops
    canonical_loops()["nod"].prompt          # text for diffusion backends
"""

from __future__ import annotations

from dataclasses import dataclass

LOOP_IDS: tuple[str, ...] = (
    "welcome", "breaking_alert", "left_gesture", "right_gesture", "deep_thought", "nod", "signoff",
)


@dataclass(frozen=True)
class LoopSpec:
    """What a canonical loop is: id, a short title, what the motion shows, and a text prompt for
    diffusion backends that take one."""

    loop_id: str
    title: str
    description: str
    prompt: str


_SPECS: dict[str, LoopSpec] = {
    spec.loop_id: spec
    for spec in (
        LoopSpec(
            "welcome", "Welcome",
            "Both forearms open outward with open palms while the anchor smiles and gives a small nod.",
            "a news anchor warmly welcomes viewers, opening both hands outward with open palms, "
            "smiling and nodding slightly",
        ),
        LoopSpec(
            "breaking_alert", "Breaking alert",
            "A quick lean toward the camera, the right hand raised with the index finger up, "
            "emphatic beats of hand and head, brows raised.",
            "a news anchor leans in urgently and raises one index finger to announce breaking news, "
            "emphatic serious expression",
        ),
        LoopSpec(
            "left_gesture", "Present to the left",
            "The anchor's left arm sweeps out to present something on the image's right, palm open, "
            "head and shoulders turning toward it.",
            "a news anchor gestures with an open hand to present something at the side of the frame, "
            "turning the head toward it",
        ),
        LoopSpec(
            "right_gesture", "Present to the right",
            "The anchor's right arm sweeps out to present something on the image's left, palm open, "
            "head and shoulders turning toward it.",
            "a news anchor gestures with an open hand to present something at the side of the frame, "
            "turning the head toward it",
        ),
        LoopSpec(
            "deep_thought", "Deep thought",
            "A slow hand-to-chin pose: the right hand rises to the chin, the other arm folds across "
            "the waist, the head tilts and the eyes look up.",
            "a news anchor thoughtfully rests a hand on the chin, head tilted, looking up, "
            "contemplative",
        ),
        LoopSpec(
            "nod", "Nod",
            "Three affirming head nods with a slight shoulder bounce and a light smile.",
            "a news anchor nods in agreement with a slight smile",
        ),
        LoopSpec(
            "signoff", "Sign-off",
            "A small wave of the raised right hand with a smile, then a slight bow before settling.",
            "a news anchor smiles and gives a small wave goodbye, then a slight bow",
        ),
    )
}
assert tuple(_SPECS) == LOOP_IDS


def canonical_loops() -> dict[str, LoopSpec]:
    """The canonical loops in ``LOOP_IDS`` order: ``{loop_id: LoopSpec}`` (a fresh dict)."""
    return dict(_SPECS)


def is_canonical(loop_id: str) -> bool:
    """True when ``loop_id`` names one of the authored loops (anything else needs a driving video)."""
    return loop_id in _SPECS


__all__ = ["LOOP_IDS", "LoopSpec", "canonical_loops", "is_canonical"]
