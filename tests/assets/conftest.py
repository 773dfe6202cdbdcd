"""Fixtures for the Dagster layer's tests."""

import pytest


@pytest.fixture(scope="session")
def coffee_jpg(tmp_path_factory):
    """A photo with no person in it (scikit-image's public-domain coffee cup)."""
    from PIL import Image
    from skimage import data

    path = tmp_path_factory.mktemp("no-person") / "coffee.jpg"
    Image.fromarray(data.coffee()).save(path, quality=90)
    return path


@pytest.fixture
def upstream_caches(storage, astronaut_png):
    """Materializes, in the Dagster instance it is given, the Tier-1 cache of loop "nod" and the
    Tier-2 cache of persona "anchor" (the astronaut): what the backend caches and renders read."""
    import dagster as dg

    from newsmotion_assets.assets.guidance import guidance_cache
    from newsmotion_assets.assets.persona import persona_cache
    from newsmotion_assets.partitions import loop_partitions, persona_partitions
    from newsmotion_assets.resources import StorageResource
    from newsmotion_engine.persona.sources import install_source

    def materialize(instance) -> None:
        resources = {"storage": StorageResource()}
        install_source(storage, astronaut_png, "anchor")
        instance.add_dynamic_partitions(loop_partitions.name, ["nod"])
        instance.add_dynamic_partitions(persona_partitions.name, ["anchor"])
        assert dg.materialize([guidance_cache], partition_key="nod", instance=instance, resources=resources).success
        assert dg.materialize([persona_cache], partition_key="anchor", instance=instance, resources=resources).success

    return materialize
