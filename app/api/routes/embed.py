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
from fastapi import APIRouter, Request

from app.api.deps import HotSwapDep, RunnerDep, SettingsDep
from app.engine import request_limits
from app.engine.live_bundle import LiveBundle
from app.engine.search_spec import EmbedAnswer, EmbedSpec
from app.engine.token_input import decode_token_ids
from app.errors import InvalidInputError, ResponseTooLargeError, ServiceError
from app.schemas.embed import (
    SERVED_MODEL,
    EmbedKind,
    EmbedRequest,
    EmbedResponse,
    OpenAIEmbedding,
    OpenAIEmbeddingRequest,
    OpenAIEmbeddingResponse,
    OpenAIModel,
    OpenAIModelList,
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


class ModelNotFoundError(ServiceError):
    """404 model_not_found (OpenAI's code): `model` names something this server does not serve. Answering
    with another model's vectors would be silently wrong (they live in another space)."""

    status_code = 404
    code = "model_not_found"


def _models(live: LiveBundle, request: Request) -> list[OpenAIModel]:
    """The served model under its names: the stable `infonce-search` (whatever is live), the live bundle's
    version, and under /collections/{name}/ the collection's name."""
    created = int(live.bundle.manifest.created_at.timestamp())
    names = [SERVED_MODEL, live.version]
    collection = getattr(request.state, "collection", None)
    if collection:
        names.append(collection)
    return [OpenAIModel(id=n, created=created) for n in dict.fromkeys(names)]


def _check_model(model: str | None, live: LiveBundle, request: Request) -> None:
    names = [m.id for m in _models(live, request)]
    if model is not None and model not in names:
        raise ModelNotFoundError(
            f"The model {model!r} does not exist on this server; it serves one model, named "
            f"{' or '.join(repr(n) for n in names)} (GET /v1/models)",
            param="model",
        )


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
    texts: list[str],
    kind: EmbedKind,
    live: LiveBundle,
    runner: Any,
    settings: Settings,
    field: str,
    *,
    decoded: bool = False,
) -> tuple[EmbedAnswer, list[int]]:
    """Check the limits /search checks, then encode through the runner; (answer, tokens per text).
    Texts `decoded` from token ids skip the character limit: their length was bounded as ids, and the
    token budget bounds the work."""
    if len(texts) > settings.max_batch:
        raise InvalidInputError(f"body.{field}: {len(texts)} texts, at most {settings.max_batch} per request")
    # the query limit, as /search; documents are bounded by the schema and the token budget
    if kind == "query" and not decoded:
        request_limits.check_query_chars(texts, settings.max_query_chars, lambda i: f"{field}[{i}]")
    size = len(texts) * live.bundle.index.dim * BYTES_PER_NUMBER
    if size > settings.max_response_bytes:
        raise ResponseTooLargeError(
            f"the answer would be about {size:,} bytes, above this server's limit of "
            f"{settings.max_response_bytes:,}: send fewer texts"
        )
    token_ids = await asyncio.to_thread(live.tokenize, texts)  # tokenised once (app/engine/query_tokens.py)
    tokens = [live.count_tokens(ids) for ids in token_ids]
    request_limits.check_token_budget(tokens, settings.max_request_tokens, field, "texts")
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
    responses={**ERRORS, 404: {"description": "`model` names another model (`model_not_found`)."}},
    summary="Embed texts (OpenAI-compatible)",
)
async def openai_embeddings(
    body: OpenAIEmbeddingRequest,
    request: Request,
    hot_swap: HotSwapDep,
    runner: RunnerDep,
    settings: SettingsDep,
) -> OpenAIEmbeddingResponse:
    """OpenAI's embeddings API over the live model (`model` in the answer = the bundle version); the
    vectors are in the index's space, as from POST /embed. `input_type` (query | document) is ours.
    Token-id arrays are decoded to text first (SEARCH_OPENAI_TOKEN_ENCODING, app/engine/token_input.py)."""
    live = hot_swap.require()
    _check_model(body.model, live, request)
    dim = live.bundle.index.dim
    ids = body.token_ids
    texts = (
        await asyncio.to_thread(decode_token_ids, ids, settings.openai_token_encoding, live)
        if ids is not None
        else list(body.input)
    )
    answer, tokens = await _embed(
        texts, body.input_type, live, runner, settings, "input", decoded=ids is not None
    )
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


@router.get(
    "/v1/models",
    response_model=OpenAIModelList,
    responses={503: {"description": "No bundle is live yet."}},
    summary="Models (OpenAI-compatible)",
)
async def openai_models(request: Request, hot_swap: HotSwapDep) -> OpenAIModelList:
    """The one model this server serves, under each name POST /v1/embeddings accepts as `model`."""
    return OpenAIModelList(data=_models(hot_swap.require(), request))


@router.get(
    "/v1/models/{model}",
    response_model=OpenAIModel,
    responses={404: {"description": "Not a name of the served model (`model_not_found`)."}, 503: {}},
    summary="One model (OpenAI-compatible)",
)
async def openai_model(model: str, request: Request, hot_swap: HotSwapDep) -> OpenAIModel:
    live = hot_swap.require()
    _check_model(model, live, request)
    return next(m for m in _models(live, request) if m.id == model)
