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
