"""Retrieval modes of POST /search: dense (FAISS), lexical (BM25) and hybrid (both, fused).

The mode a request gets: the one it asks for, else the live bundle's default, recorded at index time as
the best on validation queries (manifest `extras["retrieval"]`, training.hybrid.fusion_tuning). A vector query
has no words, so it is dense whatever the default; asking for lexical or hybrid with one is a 422, and so
is asking for either from a bundle built before hybrid search (it has no lexical index: dense only).

What `score` (and so `min_score`) means per mode: dense, the model's learned similarity; lexical, the
BM25 score (≥ 0, unbounded, only documents sharing a term with the query); hybrid, the fused score: for
RRF Σ 1/(rrf_k + rank) over the two lists (at most 2/(rrf_k+1)), for the convex fusion α·dense + (1−α)·lexical
of scores min-max normalised within each list (in [0, 1]). contract/index/fusion.py has the formulas.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from app.errors import InvalidInputError
from contract.index.fusion import MODES, FusionParams, fuse
from contract.index.vector_index import Ranking

if TYPE_CHECKING:
    from contract.bundles.bundle import Bundle

EXTRAS_KEY = "retrieval"


def record(bundle: Bundle) -> dict[str, Any]:
    value = bundle.manifest.extras.get(EXTRAS_KEY)
    return value if isinstance(value, dict) else {}


def default_mode(bundle: Bundle) -> str:
    mode = record(bundle).get("default_mode", "dense")
    return mode if bundle.lexical is not None and mode in MODES else "dense"


def modes(bundle: Bundle) -> list[str]:
    return list(MODES) if bundle.lexical is not None else ["dense"]


def fusion_params(bundle: Bundle) -> FusionParams:
    return FusionParams.from_record(record(bundle).get("fusion"))


def score_kind(mode: str, bundle: Bundle, metric: str) -> str:
    """What a `mode` answer's scores are (SearchResponse.score_kind): the model's `metric`, BM25, or the
    bundle's fusion method."""
    if mode == "lexical":
        return "bm25"
    if mode == "hybrid":
        return fusion_params(bundle).method
    return metric


def resolve(requested: str | None, bundle: Bundle, *, has_text: bool) -> str:
    """The mode that answers a request (422 naming body.mode when it cannot be served)."""
    if requested is None:
        return default_mode(bundle) if has_text else "dense"
    if requested != "dense" and not has_text:
        raise InvalidInputError(
            f"body.mode: {requested!r} searches words; a vector query can only be searched in mode 'dense'"
        )
    if requested != "dense" and bundle.lexical is None:
        raise InvalidInputError(
            f"body.mode: bundle {bundle.version} has no lexical index (built before hybrid search): "
            "only 'dense' is available"
        )
    return requested


def rows(
    bundle: Bundle,
    mode: str,
    texts: list[str],
    vectors: np.ndarray,
    top_k: int,
    *,
    dense: Callable[[np.ndarray, int], list[Ranking]],
    lexical: Callable[[list[str], int], list[Ranking]],
) -> list[Ranking]:
    """Lexical or hybrid rankings of one request (per text).

    `dense` and `lexical` are the overlay's searches bound to the request's one scope
    (contract/mutations/overlay.py: the filter's bundle positions minus the deleted or replaced ones,
    evaluated once): both cover the bundle and the documents written since, so an upserted document is
    found in every mode at once, and a deleted one in none.
    """
    assert bundle.lexical is not None  # resolve() refuses these modes without one
    if mode == "lexical":
        return lexical(texts, top_k)
    params = fusion_params(bundle)
    depth = max(top_k, params.depth)
    return [
        fuse(d, lx, params, top_k) for d, lx in zip(dense(vectors, depth), lexical(texts, depth), strict=True)
    ]


def depth(bundle: Bundle, top_k: int) -> int:
    """Candidates a hybrid request takes from each list: its top_k or the fusion's depth, the larger."""
    return max(top_k, fusion_params(bundle).depth)


def fused_batch(
    bundle: Bundle,
    texts: list[list[str]],
    dense: list[list[Ranking]],
    top_ks: list[int],
    *,
    lexical: Callable[[list[str], int], list[Ranking]],
) -> list[list[Ranking]]:
    """Hybrid rankings of several unfiltered requests of one micro-batch (per request, per text).

    `dense` holds each text's dense list, searched for the whole batch in one FAISS call with at least
    `depth(top_k)` candidates (cut here); the BM25 lists of every text come from one sparse product
    (contract/index/lexical_index.py) through `lexical`, the overlay's BM25 search bound to the batch's one
    scope (its deletions), so the delta documents are in them as in `rows`. Each request gets
    what `rows` would give it alone: the top `depth` of a longer exact list is that list's top `depth`.
    """
    assert bundle.lexical is not None
    params = fusion_params(bundle)
    deepest = max(max(top_k, params.depth) for top_k in top_ks)
    found = lexical([t for request in texts for t in request], deepest)
    out: list[list[Ranking]] = []
    at = 0
    for request_dense, top_k in zip(dense, top_ks, strict=True):
        d = max(top_k, params.depth)
        mine = found[at : at + len(request_dense)]
        at += len(request_dense)
        pairs = zip(request_dense, mine, strict=True)
        out.append([fuse((p[:d], s[:d]), (lp[:d], ls[:d]), params, top_k) for (p, s), (lp, ls) in pairs])
    return out
