"""The studio: a static, offline site for judging renders by eye (``newsmotion studio build``).

- :mod:`.catalog`: every render on disk and the state of its clip (ok, truncated, unreadable, missing);
- :mod:`.compare`: the streamed A/B comparison (PSNR, SSIM, |A-B| heatmap clip, pose error) and its record;
- :mod:`.pose`: the keypoints a render followed, pose re-extraction and pose error;
- :mod:`.charts`: the scorecard's charts (SVG + PNG);
- :mod:`.site`: the pages (Jinja templates in ``templates/``, CSS/JS in ``static/``) and the build;
- :mod:`.paths`: where each page lives;
- :mod:`.server`: ``newsmotion studio serve``, the site on localhost (HTTP range requests, so videos seek).

No Dagster here: the ``studio`` asset calls :func:`.site.build_studio`. Nothing is imported
eagerly: :mod:`.paths` is cheap for the render asset to import.
"""
