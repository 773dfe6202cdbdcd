"""The sample portraits are real photos from installed packages, available offline."""

import numpy as np
from PIL import Image

from newsmotion_engine.samples import SAMPLE_PORTRAITS, sample_rgb, write_sample_portrait


def test_every_sample_portrait_loads_as_rgb_and_writes_a_png(tmp_path):
    assert {"astronaut", "camera", "grace-hopper"} <= set(SAMPLE_PORTRAITS)
    for name, sample in SAMPLE_PORTRAITS.items():
        rgb = sample_rgb(name)
        assert rgb.dtype == np.uint8 and rgb.ndim == 3 and rgb.shape[2] == 3 and min(rgb.shape[:2]) >= 256
        assert sample.kind and sample.origin
        path = write_sample_portrait(name, tmp_path)
        assert path.name == f"{name}.png"
        np.testing.assert_array_equal(np.asarray(Image.open(path).convert("RGB")), rgb)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(f"{n}.png" for n in SAMPLE_PORTRAITS)  # no temp left
