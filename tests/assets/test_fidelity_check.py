"""The non-blocking ``render_pose_fidelity`` check: it reads each clip's pose fidelity from its
telemetry and warns (never blocks) when the clip misses the targets or was not measured."""

import dataclasses

import dagster as dg

from newsmotion_assets.assets.guidance import guidance_cache
from newsmotion_assets.assets.persona import persona_cache
from newsmotion_assets.assets.render import render
from newsmotion_assets.checks import render_pose_fidelity
from newsmotion_assets.partitions import loop_partitions, persona_partitions
from newsmotion_assets.resources import RendererResource, StorageResource
from newsmotion_engine.persona.sources import install_source
from newsmotion_engine.render.fidelity import TARGET_MOTION_ENERGY, TARGET_PCK, fidelity_problems
from newsmotion_engine.render.telemetry import RenderTelemetry

KEY = dg.MultiPartitionKey({"persona": "anchor", "loop": "nod"})


def _run(instance, **renderer):
    resources = {"renderer": RendererResource(width=360, height=640, **renderer), "storage": StorageResource()}
    return dg.materialize([render, render_pose_fidelity], partition_key=KEY, instance=instance, resources=resources)


def _check(result) -> dg.AssetCheckEvaluation:
    (evaluation,) = result.get_asset_check_evaluations()
    return evaluation


def test_check_reads_the_measured_fidelity_and_never_blocks(astronaut_png, storage):
    install_source(storage, astronaut_png, "anchor")
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(loop_partitions.name, ["nod"])
        instance.add_dynamic_partitions(persona_partitions.name, ["anchor"])
        caches = {"storage": StorageResource()}
        assert dg.materialize([guidance_cache], partition_key="nod", instance=instance, resources=caches).success
        assert dg.materialize([persona_cache], partition_key="anchor", instance=instance, resources=caches).success

        result = _run(instance)
        assert result.success  # whatever the check says: it is not blocking
        tele = RenderTelemetry.read(storage.render_path("anchor", "nod", "warp").with_suffix(".json"))
        pf = tele.pose_fidelity
        assert pf is not None and pf.frames_compared == 30 and pf.normalizer["kind"] in ("torso", "shoulder_width")
        evaluation = _check(result)
        assert evaluation.severity == dg.AssetCheckSeverity.WARN
        meets = pf.pck_body >= TARGET_PCK and (pf.motion_energy_ratio or 0) >= TARGET_MOTION_ENERGY
        assert evaluation.passed == meets == (fidelity_problems(pf) == [])
        assert evaluation.metadata["warp_pck_body"].value == pf.pck_body
        (mat,) = result.asset_materializations_for_node("render")
        assert mat.metadata["pose_fidelity"].value["pck_body"] == pf.pck_body

        storage.render_path("anchor", "nod", "warp").unlink()  # so the next run renders (no skip)
        off = _run(instance, fidelity=False)
        assert off.success
        evaluation = _check(off)
        assert not evaluation.passed and "not measured: turned off" in evaluation.metadata["problems"].value


def test_fidelity_problems_name_what_is_missed():
    from newsmotion_engine.render.telemetry import PoseFidelity

    pf = PoseFidelity(
        version=1, pck=0.95, pck_body=0.95, per_part={}, mean_px=2.0, motion_energy_ratio=0.9,
        normalizer={"kind": "torso", "px": 300.0}, alpha=0.05, threshold_px=15.0, frames=120, frames_compared=30,
        stride=4, joints=20, detected_fraction=1.0, extractor="x", calibration={}, targets={}, meets_targets=True,
        seconds=1.0,
    )  # fmt: skip
    assert fidelity_problems(pf) == []
    low = dataclasses.replace(pf, pck_body=0.5, motion_energy_ratio=0.1)
    problems = fidelity_problems(low)
    assert any("pck over head, torso and arms 0.500 < 0.9" in p for p in problems)
    assert any("motion energy ratio 0.100 < 0.8" in p for p in problems)
    assert fidelity_problems(None, "mediapipe is not installed here") == ["pose fidelity not measured: mediapipe is not installed here"]
