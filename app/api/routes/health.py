"""GET /healthz (the process answers) and GET /readyz (a bundle serves, checked end to end)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from fastapi import APIRouter

from app.api.deps import CollectionScope, CollectionsDep, HotSwapDep, RunnerDep, SettingsDep
from app.engine.search_spec import SearchSpec
from app.errors import NotReadyError, QueueFullError
from app.schemas.collections import ReadyWithCollections
from contract.errors import BundleDamaged, NoLiveBundle
from contract.index.backend import readiness_problems
from contract.index.docstore import INCLUDE_FIELDS

logger = logging.getLogger(__name__)
router = APIRouter(tags=["health"])
NOT_READY: dict[int | str, dict[str, Any]] = {503: {"description": "Not ready; the error message says why."}}


@router.get("/healthz", summary="Liveness: the process is up")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz", response_model=ReadyWithCollections, responses=NOT_READY, summary="Readiness")
async def readyz(
    hot_swap: HotSwapDep,
    runner: RunnerDep,
    settings: SettingsDep,
    registry: CollectionsDep,
    collection: CollectionScope,
) -> ReadyWithCollections:
    """Ready when a bundle is live, its encoder and index come from the same version and agree in
    dimension, the canary query returns at least one hit through the normal search path, and, with a
    Milvus index, the live alias names the live version's collection and answers a search. /readyz
    checks `default` so and lists every collection's state without loading any (`collections`);
    /collections/{c}/readyz checks c (loading it)."""
    live = hot_swap.live
    if live is None:
        reason = hot_swap.not_live_reason()
        raise NoLiveBundle(f"not ready: {reason}")
    problems = live.consistency_problems()
    problems += await asyncio.to_thread(live.damage_problems)  # files as loaded, documents readable
    # Milvus: the live alias exists, names this version's collection and answers (nothing to check for FAISS)
    problems += await asyncio.to_thread(readiness_problems, live.bundle.index)
    if problems:
        raise NotReadyError("not ready: " + "; ".join(problems))
    try:
        canary = SearchSpec(texts=[settings.canary_query], vectors=None, top_k=1, include=INCLUDE_FIELDS)
        answer = await runner.submit(live, canary)
    except QueueFullError as exc:
        raise NotReadyError(f"not ready: overloaded ({exc})") from exc
    except BundleDamaged as exc:
        raise NotReadyError(f"not ready: bundle {live.version} is damaged: {exc}") from exc
    n_hits = len(answer.hits[0])
    if n_hits == 0:
        raise NotReadyError(f"not ready: the canary query returned no results from bundle {live.version}")
    others = {} if collection is not None else await asyncio.to_thread(registry.readiness)
    return ReadyWithCollections.model_validate(
        {
            "status": "ready",
            "version": live.version,
            "n_vectors": live.n_vectors,
            "canary_hits": n_hits,
            "collections": others,
        }
    )
