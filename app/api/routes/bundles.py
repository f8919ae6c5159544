"""GET /bundles (what exists, what serves, gate decisions, last failed load) and activation."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from app.api.deps import ApiKeyDep, HotSwapDep
from app.live.bundle_listing import describe
from app.schemas.bundles import ActivateResponse, BundlesResponse

router = APIRouter(tags=["bundles"])


@router.get("/bundles", response_model=BundlesResponse, summary="Bundle versions")
async def list_bundles(
    hot_swap: HotSwapDep,
    gate_limit: Annotated[int, Query(ge=0, le=1000, description="Gate log entries per page.")] = 50,
    gate_offset: Annotated[int, Query(ge=0, le=1_000_000, description="Entries to skip, newest first.")] = 0,
) -> BundlesResponse:
    return await describe(hot_swap, gate_limit, gate_offset)


@router.post(
    "/bundles/{version}/activate",
    response_model=ActivateResponse,
    dependencies=[ApiKeyDep],
    responses={
        401: {"description": "No API key sent."},
        403: {"description": "Wrong API key, or none configured on the server."},
        404: {"description": "No bundle with that version."},
        409: {"description": "The bundle failed validation; the old one keeps serving."},
    },
    summary="Make a version live (roll back or forward)",
)
async def activate(version: str, hot_swap: HotSwapDep) -> ActivateResponse:
    """Load and validate `version` (including the canary query), point CURRENT at it, swap it in.
    Other API processes sharing the bundles folder follow CURRENT within their poll interval."""
    previous = hot_swap.live.version if hot_swap.live else None
    live = await hot_swap.activate(version)
    return ActivateResponse(version=live.version, previous=previous, encoder_backend=live.encoder_backend)
