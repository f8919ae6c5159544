"""POST /feedback: relevance judgments on what /search showed (issue 41), stored durably per collection.

A batch is checked whole before anything is written: every document must be one the live bundle (with its
mutation log) serves, every query non-blank, every search id one this bundles folder signed for this
collection (contract/feedback/search_id.py). The first refusal answers 422 naming the item and field and
nothing is stored; an accepted batch is one transaction of the store (contract/feedback/store.py),
committed on disk before the answer.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from fastapi import APIRouter, Request

from app.api.deps import CollectionScope, FeedbackKeyDep, HotSwapDep, SettingsDep
from app.errors import InvalidInputError, ServiceError
from app.schemas.feedback import FeedbackRequest, FeedbackResponse
from app.settings import Settings
from contract.defaults import DEFAULT_COLLECTION
from contract.feedback import search_id
from contract.feedback.store import FeedbackStore, Judgment

logger = logging.getLogger(__name__)
router = APIRouter(tags=["feedback"])
DAY_S = 86_400.0

ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"description": "No key sent."},
    403: {"description": "Wrong key (SEARCH_API_KEY or SEARCH_FEEDBACK_KEY), or none configured."},
    413: {"description": "Body larger than SEARCH_MAX_BODY_BYTES."},
    404: {
        "description": "An unknown document, or a search id this server did not make (`error.message` "
        "names the item and field). Nothing was stored."
    },
    422: {"description": "Malformed body or a blank query (`error.message` names the item and field)."},
    503: {"description": "No bundle is live, or the judgment store cannot be written. Nothing was stored."},
}


class JudgedUnknownError(ServiceError):
    """A judgment about a document or a search this server does not know: 404, as a GET of it would be."""

    status_code = 404
    code = "not_found"


def feedback_store(settings: Settings) -> FeedbackStore:
    """The judgment store of a collection's bundles folder (a cheap handle: a connection per thread)."""
    return FeedbackStore(
        settings.bundles_dir,
        max_rows=settings.feedback_max_rows,
        retention_s=settings.feedback_retention_days * DAY_S,
    )


@router.post(
    "/feedback",
    response_model=FeedbackResponse,
    dependencies=[FeedbackKeyDep],
    responses=ERRORS,
    summary="Send relevance judgments",
)
async def feedback(
    body: FeedbackRequest,
    request: Request,
    hot_swap: HotSwapDep,
    settings: SettingsDep,
    collection: CollectionScope,
) -> FeedbackResponse:
    """Store judgments `{query, document_id, relevant, search_id?}` (all of the batch or none). With a
    search id the judgment records the version, mode and rank the document was shown at; the judgments
    of the live version feed the `live` section of GET /generalization-gap."""
    live = hot_swap.require()
    name = collection or DEFAULT_COLLECTION
    rows = await asyncio.to_thread(_checked, body, live, settings, name)
    store = feedback_store(settings)
    first, last = await asyncio.to_thread(store.append, rows)
    total = await asyncio.to_thread(store.count)
    return FeedbackResponse(stored=len(rows), first_seq=first, last_seq=last, total=total)


def _checked(body: FeedbackRequest, live: Any, settings: Settings, collection: str) -> list[Judgment]:
    """The batch as store rows, or InvalidInputError about its first bad item (nothing written yet)."""
    secret = search_id.load_secret(settings.bundles_dir)
    rows = []
    for i, j in enumerate(body.judgments):
        where = f"body.judgments[{i}]"
        if not j.query.strip():
            raise InvalidInputError(f"{where}.query: is blank")
        if live.overlay.get(j.document_id) is None:
            raise JudgedUnknownError(
                f"{where}.document_id: no document {j.document_id!r} in bundle {live.version}"
            )
        version = mode = rank = None
        above: tuple[str, ...] = ()
        if j.search_id is not None:
            try:
                shown = search_id.verify(secret, j.search_id)
            except search_id.SearchIdError as exc:
                raise JudgedUnknownError(f"{where}.search_id: {exc}") from None
            if shown.collection != collection:
                raise InvalidInputError(f"{where}.search_id: made for collection {shown.collection!r}")
            version, mode, rank = shown.version, shown.mode, shown.rank_of(j.document_id)
            # what was shown above it: a retrain's hard negatives when it is relevant (training/feedback)
            above = shown.ids[: rank - 1] if rank is not None else ()
        rows.append(Judgment(j.query, j.document_id, j.grade, version, mode, rank, above=above))
    return rows
