"""The catalogue of canonical loops: ids, titles, descriptions and prompts."""

from newsmotion_engine.guidance.catalogue import LOOP_IDS, LoopSpec, canonical_loops, is_canonical


def test_loop_ids_and_specs():
    assert LOOP_IDS == ("welcome", "breaking_alert", "left_gesture", "right_gesture", "deep_thought", "nod", "signoff")
    specs = canonical_loops()
    assert tuple(specs) == LOOP_IDS
    for loop_id, spec in specs.items():
        assert isinstance(spec, LoopSpec) and spec.loop_id == loop_id
        assert spec.title and spec.description and len(spec.prompt) > 20
    assert len({s.description for s in specs.values()}) == len(LOOP_IDS)
    assert all(is_canonical(i) for i in LOOP_IDS)
    assert not is_canonical("wave") and not is_canonical("Welcome")
    # Callers get a copy: mutating it cannot change the catalogue.
    specs.pop("nod")
    assert "nod" in canonical_loops()
