"""POST /search: text or vector queries, top-k with filters, scored by the model's learned similarity."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Body

from app.api.deps import CollectionScope, HotSwapDep, RunnerDep, SettingsDep
from app.engine import request_limits, retrieval_modes
from app.engine.search_spec import SearchSpec
from app.errors import InvalidInputError, ResponseTooLargeError
from app.schemas.search import SEARCH_EXAMPLES, Hit, QueryResult, SearchRequest, SearchResponse, Timings
from app.settings import Settings
from contract.defaults import DEFAULT_COLLECTION
from contract.feedback import search_id

router = APIRouter(tags=["search"])
# a request with at most this many query characters is tokenised on the event loop rather than in a thread:
# the demo's queries (64 characters on average) tokenise in 0.04 ms of CPU, less than the hand-off costs
# (about 0.07 ms of server CPU per request, A/B, bench/serving/request_profile.py's setup); 2048 characters
# took 1.5 ms on the loaded 2-core box, too long to hold the event loop, so the cut-off is a quarter of that
INLINE_TOKENISE_CHARS = 512
HIT_OVERHEAD_BYTES = 40  # {"id":"","score":-0.123456789} and separators, per hit
ERRORS: dict[int | str, dict[str, Any]] = {
    409: {
        "description": "A query vector whose length is not the live model's dimension (`dimension_mismatch`)."
    },
    422: {
        "description": "Malformed body (`error.details` names each offending field), or one the bundle "
        "cannot answer (a zero vector, a mode it lacks)."
    },
    413: {
        "description": "Body larger than SEARCH_MAX_BODY_BYTES, a request over the token budget "
        "(`token_budget`, SEARCH_MAX_REQUEST_TOKENS) or an answer over the response-size limit "
        "(`response_too_large`, SEARCH_MAX_RESPONSE_BYTES)."
    },
    429: {"description": "The batching queue is full; retry later."},
    503: {"description": "No bundle is live yet."},
}


@router.post(
    "/search",
    response_model=SearchResponse,
    response_model_exclude_none=True,
    responses=ERRORS,
    summary="Search",
)
async def search(
    body: Annotated[SearchRequest, Body(openapi_examples=SEARCH_EXAMPLES)],
    hot_swap: HotSwapDep,
    runner: RunnerDep,
    settings: SettingsDep,
    collection: CollectionScope,
) -> SearchResponse:
    """Top-k documents per query, best first. Scores are the learned similarity of the live model
    (cosine for InfoNCE; -1/2 * sum_c lambda_c (u_c - v_c)^2 for AnInfoNCE) in dense mode, BM25 in lexical
    mode, the fused score in hybrid mode: `score_kind` names which."""
    started = time.perf_counter()
    live = hot_swap.require()  # one bundle for the whole request, even if a swap happens meanwhile
    field = next(n for n in ("query", "queries", "vector", "vectors") if getattr(body, n) is not None)
    _check_limits(body, field, settings)
    prepared = None
    if body.texts is not None:
        # the cache first: a hit pays its lookup only; the misses are tokenised once, for the budget and
        # for whichever encoder runs (app/engine/query_tokens.py)
        # (lexical queries are not encoded: no cache lookup, their tokens only counted)
        encoded = (body.mode or retrieval_modes.default_mode(live.bundle)) != "lexical"
        if sum(map(len, body.texts)) <= INLINE_TOKENISE_CHARS:
            prepared = live.prepare_queries(body.texts, None, encoded)
        else:
            prepared = await asyncio.to_thread(live.prepare_queries, body.texts, None, encoded)
        request_limits.check_token_budget(prepared.tokens, settings.max_request_tokens, field, "queries")
    raw = body.raw_vectors
    spec = SearchSpec(
        texts=body.texts,
        tokens=None if prepared is None else prepared.tokens,
        token_ids=None if prepared is None else prepared.token_ids,
        cached=None if prepared is None else prepared.cached,
        vectors=live.vectors_to_index_space(raw, field) if raw is not None else None,
        top_k=body.offset + body.top_k,  # the page is the tail of this ranking (cut below)
        filter=body.filter_dict(),
        min_score=body.min_score,
        include=list(dict.fromkeys(body.include)),
        mode=retrieval_modes.resolve(body.mode, live.bundle, has_text=body.texts is not None),
    )
    answer = await runner.submit(live, spec)
    hits = [h[body.offset :] for h in answer.hits]
    size = _estimated_bytes(hits)
    if size > settings.max_response_bytes:
        raise ResponseTooLargeError(
            f"the answer would be about {size:,} bytes, above this server's limit of "
            f"{settings.max_response_bytes:,}: ask for a smaller top_k, fewer queries or fewer include fields"
        )
    shown = _signer(settings, collection or DEFAULT_COLLECTION, live.version, spec.mode)
    return SearchResponse(
        version=live.version,
        metric=live.encoder.metric,
        mode=spec.mode,
        score_kind=retrieval_modes.score_kind(spec.mode, live.bundle, live.encoder.metric),
        results=[QueryResult(hits=h, search_id=shown(h)) for h in hits],
        timings=Timings(
            encode_ms=round(answer.encode_ms, 3),
            search_ms=round(answer.search_ms, 3),
            total_ms=round((time.perf_counter() - started) * 1000, 3),
        ),
    )


def _signer(settings: Settings, collection: str, version: str, mode: str) -> Callable[[list[Hit]], str]:
    """The `search_id` of each page: what it showed, signed for POST /feedback (app/api/routes/feedback.py)."""
    secret = search_id.load_secret(settings.bundles_dir)
    return lambda page: search_id.make(secret, collection, version, mode, [h.id for h in page])


def _check_limits(body: SearchRequest, field: str, settings: Settings) -> None:
    """This server's limits on one request (SEARCH_MAX_*): a 422 naming the field past its limit."""
    if body.n_queries > settings.max_batch:
        raise InvalidInputError(
            f"body.{field}: {body.n_queries} queries, at most {settings.max_batch} per request"
        )
    request_limits.check_depth(body.top_k, body.offset, settings.max_top_k)
    if body.filter and len(body.filter) > settings.max_filter_fields:
        raise InvalidInputError(
            f"body.filter: {len(body.filter)} fields, this server's limit is {settings.max_filter_fields}"
        )
    request_limits.check_query_chars(
        body.texts or [],
        settings.max_query_chars,
        lambda i: "query" if field == "query" else f"queries[{i}]",
    )


def _estimated_bytes(hits: list[list[Hit]]) -> int:
    """JSON size of the hits, within a few percent (no serialisation: it runs for every request)."""
    total = 0
    for per_query in hits:
        for h in per_query:
            total += HIT_OVERHEAD_BYTES + len(h.id) + len(h.title or "") + len(h.text or "")
            if h.metadata is not None:
                total += len(str(h.metadata))
    return total
