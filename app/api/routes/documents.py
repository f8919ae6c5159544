"""POST /documents (upsert), DELETE /documents/{id}, POST /documents/delete (batch), GET /documents/{id}.

A write is validated completely, encoded (upserts), committed to the shared mutation log in one
transaction, then applied to this replica's live bundle before the answer (app/live/mutation_applier.py). Any
refusal happens before the commit, so a refused batch leaves nothing behind; a committed batch is
never partly visible (one log transaction, applied in one overlay step).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Annotated, Any

import numpy as np
from fastapi import APIRouter, Body, Path

from app.api.deps import ApiKeyDep, HotSwapDep, RunnerDep, SettingsDep
from app.engine.live_bundle import LiveBundle
from app.errors import InvalidInputError, ServiceError
from app.live.hot_swap import HotSwap
from app.live.mutation_applier import encode_documents
from app.schemas.documents import (
    MAX_ID_CHARS,
    DeleteRequest,
    DocumentOut,
    MutationResponse,
    UpsertRequest,
)
from app.settings import Settings
from contract.mutations.log import NewDocument

logger = logging.getLogger(__name__)
router = APIRouter(tags=["documents"])
ENCODE_SLICE = 8  # documents per encoder call in an upsert (each call holds the inference thread)


class DocumentNotFoundError(ServiceError):
    status_code = 404
    code = "document_not_found"


WRITE_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"description": "No API key sent."},
    403: {"description": "Wrong API key, or none configured on the server."},
    413: {"description": "Body larger than SEARCH_MAX_BODY_BYTES."},
    422: {
        "description": "Malformed body, a batch over SEARCH_MAX_DOCUMENTS_BATCH, a text over "
        "SEARCH_MAX_DOCUMENT_CHARS or an id twice in one batch (`error.message` names the field). "
        "Nothing was written."
    },
    503: {"description": "No bundle is live, or the mutation log cannot be written. Nothing was written."},
}


def _check_batch(n: int, field: str, settings: Settings) -> None:
    if n > settings.max_documents_batch:
        raise InvalidInputError(
            f"body.{field}: {n} items, at most {settings.max_documents_batch} per request "
            "(SEARCH_MAX_DOCUMENTS_BATCH)"
        )


async def _applied(hot_swap: HotSwap, live: LiveBundle, first: int, last: int, n: int) -> MutationResponse:
    """Apply the log up to the new rows here (read-your-writes), then describe the write."""
    try:
        await hot_swap.mutations.catch_up(hot_swap)
    except Exception:  # committed all the same: the poller applies it on its next tick
        logger.exception("write %d..%d is in the log but could not be applied here yet", first, last)
    serving = hot_swap.live or live
    return MutationResponse(
        applied=n, first_seq=first, seq=last, version=serving.version, live_seq=serving.overlay.seq
    )


@router.post(
    "/documents",
    response_model=MutationResponse,
    response_model_exclude_none=True,
    dependencies=[ApiKeyDep],
    responses=WRITE_ERRORS,
    summary="Upsert documents",
)
async def upsert(
    body: Annotated[UpsertRequest, Body()], hot_swap: HotSwapDep, runner: RunnerDep, settings: SettingsDep
) -> MutationResponse:
    """Add or replace documents without a retrain. They are searchable on this replica when the answer
    arrives, on the others within SEARCH_RELOAD_POLL_SECONDS, and in every later bundle."""
    docs = body.documents
    _check_batch(len(docs), "documents", settings)
    seen: dict[str, int] = {}
    for i, d in enumerate(docs):
        for name in ("text", "title"):
            if len(getattr(d, name)) > settings.max_document_chars:
                raise InvalidInputError(
                    f"body.documents[{i}].{name}: longer than this server's limit of "
                    f"{settings.max_document_chars} characters (SEARCH_MAX_DOCUMENT_CHARS)"
                )
        if d.id in seen:
            raise InvalidInputError(f"body.documents[{i}].id: {d.id!r} is also documents[{seen[d.id]}].id")
        seen[d.id] = i
    live = hot_swap.require()
    new = [NewDocument(d.id, d.title, d.text, dict(d.metadata)) for d in docs]
    # on the model's thread, in slices: searches queued meanwhile run between them instead of waiting
    # for the whole batch (the fair-slicing idea of app/engine/token_slicing.py)
    parts = [
        await runner.inference.call(encode_documents, live, new[i : i + ENCODE_SLICE])
        for i in range(0, len(new), ENCODE_SLICE)
    ]
    vectors = np.concatenate(parts)  # (n, dim)
    first, last = await asyncio.to_thread(
        hot_swap.mutations.log.append_upserts, new, vectors, live.overlay.key
    )
    return await _applied(hot_swap, live, first, last, len(new))


async def _delete(ids: list[str], hot_swap: HotSwap) -> MutationResponse:
    live = hot_swap.require()
    await hot_swap.mutations.catch_up(hot_swap)  # judge `not_found` against everything logged so far
    live = hot_swap.live or live
    missing = await asyncio.to_thread(lambda: [i for i in ids if not live.overlay.exists(i)])
    first, last = await asyncio.to_thread(hot_swap.mutations.log.append_deletes, ids)
    answer = await _applied(hot_swap, live, first, last, len(ids))
    answer.not_found = missing
    return answer


@router.post(
    "/documents/delete",
    response_model=MutationResponse,
    dependencies=[ApiKeyDep],
    responses=WRITE_ERRORS,
    summary="Delete documents (batch)",
)
async def delete_many(body: DeleteRequest, hot_swap: HotSwapDep, settings: SettingsDep) -> MutationResponse:
    """Delete by id. Unknown ids are not an error: they are listed in `not_found` (idempotent 200)."""
    _check_batch(len(body.ids), "ids", settings)
    return await _delete(list(dict.fromkeys(body.ids)), hot_swap)


DocIdPath = Annotated[str, Path(min_length=1, max_length=MAX_ID_CHARS, description="Document id.")]


@router.delete(
    "/documents/{doc_id:path}",
    response_model=MutationResponse,
    dependencies=[ApiKeyDep],
    responses=WRITE_ERRORS,
    summary="Delete one document",
)
async def delete_one(doc_id: DocIdPath, hot_swap: HotSwapDep) -> MutationResponse:
    """Delete by id; an unknown id answers 200 with it in `not_found` (deletes are idempotent)."""
    return await _delete([doc_id], hot_swap)


@router.get(
    "/documents/{doc_id:path}",
    response_model=DocumentOut,
    responses={404: {"description": "No such document (never existed, or deleted)."}, 503: {}},
    summary="Get one document",
)
async def get_document(doc_id: DocIdPath, hot_swap: HotSwapDep) -> DocumentOut:
    """The document as this replica serves it now, with the seq of its last write."""
    live = hot_swap.require()
    doc = await asyncio.to_thread(live.overlay.get, doc_id)
    if doc is None:
        raise DocumentNotFoundError(f"no document {doc_id!r} in bundle {live.version} and its mutation log")
    return DocumentOut(
        id=doc["id"],
        title=doc["title"],
        text=doc["text"],
        metadata=doc["metadata"],
        seq=doc["seq"],
        version=live.version,
    )
