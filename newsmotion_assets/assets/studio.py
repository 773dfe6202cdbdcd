"""``studio``: the static offline site (``storage/motion/studio/``) built from every render, the
A/B comparisons of each persona x loop's backends and the scorecard's charts."""

import dagster as dg

from newsmotion_assets.assets.ab import ab_comparison
from newsmotion_assets.assets.render import render
from newsmotion_assets.assets.reports import scorecard
from newsmotion_assets.metadata import studio_url
from newsmotion_assets.resources import StorageResource
from newsmotion_engine.studio.site import build_studio


@dg.asset(
    deps=[render, scorecard, ab_comparison],
    group_name="reports",
    kinds={"html"},
    description="The studio: index of every render (thumbnails, badges), a page per render (clip, guidance "
    "skeleton, telemetry), A/B pages (wipe, |A-B| heatmap, PSNR/SSIM/pose plots) and scorecard charts, "
    "under storage/motion/studio/. Open it with `newsmotion studio serve`.",
)
def studio(context: dg.AssetExecutionContext, storage: StorageResource) -> dg.MaterializeResult:
    report = build_studio(storage.store, log=context.log.info)
    for problem in report.problems:
        context.log.warning(problem)
    return dg.MaterializeResult(
        metadata={
            "index": studio_url("index.html"),
            "scorecard": studio_url("scorecard.html"),
            "site": dg.MetadataValue.path(str(report.root)),
            "renders": report.renders,
            "comparisons": report.comparisons,
            "reused_comparisons": report.reused_comparisons,
            "ab_pages": dg.MetadataValue.md("\n".join(f"- [{key}]({studio_url(page).value})" for key, page in report.ab_pages.items()) or "none"),
            "problems": dg.MetadataValue.md("\n".join(f"- {p}" for p in report.problems) or "none"),
        }
    )
