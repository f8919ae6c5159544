"""POST /embed and the OpenAI-compatible POST /v1/embeddings: vectors in the live index's space.

Vector search elsewhere (a client's own store, a re-ranker, a cache) needs vectors the live index
would compare: for AnInfoNCE that is the √Λ-scaled embedding, which no sentence-transformers call
gives. Both routes go through the same runner as /search (micro-batched with concurrent searches,
sliced by tokens, bounded by the queue) and take the same limits: SEARCH_MAX_BATCH texts,
SEARCH_MAX_QUERY_CHARS characters per query, SEARCH_MAX_REQUEST_TOKENS tokens in all, the response-size cap.
"""

from __future__ import annotations

import asyncio
import base64
from typing import Any

import numpy as np
from fastapi import APIRouter

from app.api.deps import HotSwapDep, RunnerDep, SettingsDep
from app.engine.live_bundle import LiveBundle
from app.engine.search_spec import EmbedAnswer, EmbedSpec
from app.errors import InvalidInputError, ResponseTooLargeError, TokenBudgetError
from app.schemas.embed import (
    EmbedKind,
    EmbedRequest,
    EmbedResponse,
    OpenAIEmbedding,
    OpenAIEmbeddingRequest,
    OpenAIEmbeddingResponse,
    OpenAIUsage,
)
from app.settings import Settings

router = APIRouter(tags=["embed"])
BYTES_PER_NUMBER = 12  # "-0.12345678," in JSON
ERRORS: dict[int | str, dict[str, Any]] = {
    422: {"description": "Malformed body (naming the field), too many texts or a text too long."},
    413: {
        "description": "Body larger than SEARCH_MAX_BODY_BYTES, a request over the token budget "
        "(`token_budget`) or an answer over the response-size limit (`response_too_large`)."
    },
    429: {"description": "The batching queue is full; retry later."},
    503: {"description": "No bundle is live yet."},
}


def _shortened(rows: np.ndarray, dimensions: int, *, renormalise: bool) -> np.ndarray:
    """OpenAI's `dimensions`: the first components, L2-normalised again for a cosine model (as for
    OpenAI's text-embedding-3 models). This model was not trained to front-load its information, so
    shortened vectors lose more quality than theirs; an AnInfoNCE model's are cut only (partial −½·L2)."""
    cut = rows[:, :dimensions]  # (n, dimensions)
    if not renormalise:
        return cut
    norms = np.linalg.norm(cut, axis=1, keepdims=True)  # (n, 1)
    return cut / np.where(norms > 0, norms, 1.0)


async def _embed(
    texts: list[str], kind: EmbedKind, live: LiveBundle, runner: Any, settings: Settings, field: str
) -> tuple[EmbedAnswer, list[int]]:
    """Check the limits /search checks, then encode through the runner; (answer, tokens per text)."""
    if len(texts) > settings.max_batch:
        raise InvalidInputError(f"body.{field}: {len(texts)} texts, at most {settings.max_batch} per request")
    # the query limit, as /search; documents are bounded by the schema and the token budget
    long = [i for i, t in enumerate(texts) if kind == "query" and len(t) > settings.max_query_chars]
    if long:
        raise InvalidInputError(
            f"body.{field}[{long[0]}]: longer than this server's limit of {settings.max_query_chars} characters"
        )
    size = len(texts) * live.bundle.index.dim * BYTES_PER_NUMBER
    if size > settings.max_response_bytes:
        raise ResponseTooLargeError(
            f"the answer would be about {size:,} bytes, above this server's limit of "
            f"{settings.max_response_bytes:,}: send fewer texts"
        )
    token_ids = await asyncio.to_thread(live.tokenize, texts)  # tokenised once (app/engine/query_tokens.py)
    tokens = [len(ids) for ids in token_ids]
    if sum(tokens) > settings.max_request_tokens:
        raise TokenBudgetError(
            f"body.{field}: {sum(tokens)} tokens, above this server's budget of "
            f"{settings.max_request_tokens} per request (send fewer or shorter texts)"
        )
    spec = EmbedSpec(texts=texts, kind=kind, tokens=tokens, token_ids=token_ids)
    return await runner.submit(live, spec), tokens


@router.post("/embed", response_model=EmbedResponse, responses=ERRORS, summary="Embed texts")
async def embed(
    body: EmbedRequest, hot_swap: HotSwapDep, runner: RunnerDep, settings: SettingsDep
) -> EmbedResponse:
    """Vectors of queries or documents in the live index's space, with the bundle version that made them."""
    live = hot_swap.require()  # one bundle for the whole request
    answer, _ = await _embed(body.texts, body.kind, live, runner, settings, "input")
    return EmbedResponse(
        version=live.version,
        metric=live.encoder.metric,
        kind=body.kind,
        encoder=live.encoder_backend if body.kind == "query" else "torch",
        dim=int(answer.vectors.shape[1]),
        embeddings=answer.vectors.tolist(),
        encode_ms=round(answer.encode_ms, 3),
    )


@router.post(
    "/v1/embeddings",
    response_model=OpenAIEmbeddingResponse,
    responses=ERRORS,
    summary="Embed texts (OpenAI-compatible)",
)
async def openai_embeddings(
    body: OpenAIEmbeddingRequest, hot_swap: HotSwapDep, runner: RunnerDep, settings: SettingsDep
) -> OpenAIEmbeddingResponse:
    """OpenAI's embeddings API over the live model (`model` in the answer = the bundle version); the
    vectors are in the index's space, as from POST /embed. `input_type` (query | document) is ours."""
    live = hot_swap.require()
    dim = live.bundle.index.dim
    answer, tokens = await _embed(body.texts, body.input_type, live, runner, settings, "input")
    rows = answer.vectors  # (n, dim)
    if body.dimensions is not None and body.dimensions < dim:
        rows = _shortened(rows, body.dimensions, renormalise=live.encoder.metric == "cosine")
    rows = np.ascontiguousarray(rows, dtype="<f4")  # (n, dimensions or dim)
    data = [
        OpenAIEmbedding(
            index=i,
            embedding=base64.b64encode(row.tobytes()).decode()
            if body.encoding_format == "base64"
            else row.tolist(),
        )
        for i, row in enumerate(rows)
    ]
    used = sum(tokens)
    return OpenAIEmbeddingResponse(
        data=data, model=live.version, usage=OpenAIUsage(prompt_tokens=used, total_tokens=used)
    )
