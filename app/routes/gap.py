"""GET /generalization-gap: the live bundle's GapReport, unchanged, with its version and model."""

from __future__ import annotations

from fastapi import APIRouter

from app.deps import HotSwapDep
from app.encoder_choice import served_section
from app.errors import ReportMissingError
from app.schemas import GapResponse

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
async def generalization_gap(hot_swap: HotSwapDep) -> GapResponse:
    """The estimated generalization gap (risks, gap, bounds; all in nats) reported when the live bundle
    was built, with the bundle version and the model identity."""
    live = hot_swap.require()
    report = live.bundle.report
    if report is None:
        raise ReportMissingError(
            f"bundle {live.version} has no generalization-gap report (report/report.json)"
        )
    served = served_section(live.bundle, live.backend, report)
    report = report.model_copy(update={"served_query_encoder": served})
    return GapResponse(version=live.version, model=live.serving_summary(), report=report)
