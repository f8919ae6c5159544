"""GET /generalization-gap: the live bundle's GapReport as written, with its version and model, plus what
only the live bundle knows: the query encoder it serves and the test metrics of each of its search modes."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from fastapi import APIRouter

from app.api.deps import CollectionScope, HotSwapDep, SettingsDep
from app.api.routes.feedback import feedback_store
from app.api.routes.jobs import QueueDep
from app.engine.encoder_choice import served_section
from app.engine.retrieval_modes import default_mode, modes
from app.errors import ReportMissingError
from app.live.drift_retrain import maybe_retrain
from app.live.live_risk import live_section
from app.schemas.search import GapResponse
from contract.bundles.bundle import Bundle
from contract.bundles.report_schema import ModeMetrics
from contract.defaults import DEFAULT_COLLECTION

router = APIRouter(tags=["report"])


@router.get(
    "/generalization-gap",
    response_model=GapResponse,
    responses={
        503: {"description": "No bundle is live."},
        404: {"description": "The live bundle has no report."},
    },
    summary="Generalization-gap report of the live model",
)
async def generalization_gap(
    hot_swap: HotSwapDep, settings: SettingsDep, queue: QueueDep, collection: CollectionScope
) -> GapResponse:
    """The estimated generalization gap (risks, gap, bounds; all in nats) reported when the live bundle
    was built, with the bundle version and the model identity. The retrieval section also lists the test
    metrics of every search mode the bundle has, its default (served) mode marked."""
    live = hot_swap.require()
    report = live.bundle.report
    if report is None:
        raise ReportMissingError(
            f"bundle {live.version} has no generalization-gap report (report/report.json)"
        )
    served = served_section(live.bundle, live.encoder_backend, report)
    update: dict[str, Any] = {"served_query_encoder": served}
    if report.retrieval is not None:
        update["retrieval"] = report.retrieval.model_copy(update={"by_mode": mode_rows(live.bundle)})
    report = report.model_copy(update=update)
    # off the event loop: it may encode every judged query (cached per version and judgment count)
    live_part = await asyncio.to_thread(live_section, live, feedback_store(settings))
    hot_swap.metrics.set_live_risk(live_part)  # the collection's own series (app/metrics.py)
    data = live.bundle.manifest.extras.get("data")
    await asyncio.to_thread(
        maybe_retrain,  # SEARCH_RETRAIN_ON_DRIFT (app/live/drift_retrain.py says why here)
        live_part,
        settings,
        queue,
        version=live.version,
        collection=collection or DEFAULT_COLLECTION,
        data_name=Path(data).name if isinstance(data, str) else None,
    )
    return GapResponse(version=live.version, model=live.serving_summary(), report=report, live=live_part)


def mode_rows(bundle: Bundle) -> list[ModeMetrics]:
    """The report's `retrieval.by_mode` from the bundle manifest: `metrics["test.<mode>"]` per mode the
    bundle has; a bundle from before hybrid search records only `metrics["test"]`, its (dense) mode's."""
    served, metrics = default_mode(bundle), bundle.manifest.metrics
    rows = []
    for mode in modes(bundle):
        values = metrics.get(f"test.{mode}") or (metrics.get("test", {}) if mode == served else {})
        rows.append(
            ModeMetrics.model_validate(
                {
                    "mode": mode,
                    "served": mode == served,
                    "ndcg_at_10": values.get("ndcg@10"),
                    "recall_at_10": values.get("recall@10"),
                    "mrr_at_10": values.get("mrr@10"),
                    "metrics": dict(values),
                }
            )
        )
    return rows
