"""POST /documents (upsert), DELETE /documents/{id}, POST /documents/delete (batch), GET /documents/{id}.

A write is validated here completely, then one call to the MutationApplier (app/live/mutation_applier.py)
encodes it (upserts), commits it to the shared mutation log in one transaction and applies it to this
replica's live bundle before the answer. Any refusal happens before the commit, so a refused batch leaves
nothing behind; a committed batch is never partly visible (one log transaction, applied in one overlay
step).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Annotated, Any

from fastapi import APIRouter, Body, Path

from app.api.deps import ApiKeyDep, HotSwapDep, MutationsDep, RunnerDep, SettingsDep
from app.errors import InvalidInputError, ServiceError
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


class DocumentNotFoundError(ServiceError):
    status_code = 404
    code = "document_not_found"


WRITE_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"description": "No API key sent."},
    403: {"description": "Wrong API key, or none configured on the server."},
    413: {"description": "Body larger than SEARCH_MAX_BODY_BYTES."},
    422: {
        "description": "Malformed body, a batch over SEARCH_MAX_DOCUMENTS_BATCH, a text over "
        "SEARCH_MAX_DOCUMENT_CHARS (`error.message` names the field). "
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


@router.post(
    "/documents",
    response_model=MutationResponse,
    response_model_exclude_none=True,
    dependencies=[ApiKeyDep],
    responses=WRITE_ERRORS,
    summary="Upsert documents",
)
async def upsert(
    body: Annotated[UpsertRequest, Body()], mutations: MutationsDep, runner: RunnerDep, settings: SettingsDep
) -> MutationResponse:
    """Add or replace documents without a retrain. They are searchable on this replica when the answer
    arrives, on the others within SEARCH_RELOAD_POLL_SECONDS, and in every later bundle."""
    docs = body.documents
    _check_batch(len(docs), "documents", settings)
    for i, d in enumerate(docs):
        for name in ("text", "title"):
            if len(getattr(d, name)) > settings.max_document_chars:
                raise InvalidInputError(
                    f"body.documents[{i}].{name}: longer than this server's limit of "
                    f"{settings.max_document_chars} characters (SEARCH_MAX_DOCUMENT_CHARS)"
                )
    # an id twice in one batch: the later one wins, as two upserts in a row would (JSON Schema cannot
    # say "unique by id", so the spec allows it and the server must too); one log row per id
    last = {d.id: d for d in docs}
    new = [NewDocument(d.id, d.title, d.text, dict(d.metadata)) for d in last.values()]
    return await mutations.upsert(new, runner.inference)


@router.post(
    "/documents/delete",
    response_model=MutationResponse,
    dependencies=[ApiKeyDep],
    responses=WRITE_ERRORS,
    summary="Delete documents (batch)",
)
async def delete_many(
    body: DeleteRequest, mutations: MutationsDep, settings: SettingsDep
) -> MutationResponse:
    """Delete by id. Unknown ids are not an error: they are listed in `not_found` (idempotent 200)."""
    _check_batch(len(body.ids), "ids", settings)
    return await mutations.delete(list(dict.fromkeys(body.ids)))


DocIdPath = Annotated[str, Path(min_length=1, max_length=MAX_ID_CHARS, description="Document id.")]


@router.delete(
    "/documents/{doc_id:path}",
    response_model=MutationResponse,
    dependencies=[ApiKeyDep],
    responses=WRITE_ERRORS,
    summary="Delete one document",
)
async def delete_one(doc_id: DocIdPath, mutations: MutationsDep) -> MutationResponse:
    """Delete by id; an unknown id answers 200 with it in `not_found` (deletes are idempotent)."""
    return await mutations.delete([doc_id])


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
