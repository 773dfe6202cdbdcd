"""The studio: a static, offline site for judging renders by eye (``newsmotion studio build``).

- :mod:`.catalog`: every render on disk and the state of its clip (ok, truncated, unreadable, missing);
- :mod:`.compare`: the streamed A/B comparison (PSNR, SSIM, |A-B| heatmap clip, pose error) and its record;
- :mod:`.pose`: the keypoints a render followed, pose re-extraction and pose error;
- :mod:`.charts`: the scorecard's charts (SVG + PNG);
- :mod:`.site`: the pages (Jinja templates in ``templates/``, CSS/JS in ``static/``) and the build;
- :mod:`.server`: ``newsmotion studio serve``, the site on localhost (HTTP range requests, so videos seek).

No Dagster here: the ``studio`` asset calls :func:`build_studio`.
"""

from newsmotion_engine.studio.site import StudioReport, ab_page, build_studio, render_page

__all__ = ["StudioReport", "ab_page", "build_studio", "render_page"]
