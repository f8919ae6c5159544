"""Choose what a bundle serves by default: dense, lexical or hybrid, and how hybrid fuses (RRF or convex,
with its parameter), by nDCG@10 on validation queries carved from the training split (training.data.validation_carve).

Every candidate's validation score is recorded, so `/bundles` shows why the default is what it is. Runs
are contract.index.fusion Rankings per query (positions into the bundle's documents).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from contract.index.fusion import MODES, FusionParams, fuse
from contract.index.vector_index import Ranking
from training.eval.evaluate import MAIN_METRIC, trec_metrics

RRF_KS = (5, 10, 20, 40, 60, 100)
ALPHAS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
K_VALUES = (1, 10, 100)

Runs = Mapping[str, Ranking]  # query id -> ranking


def metrics_of(
    runs: Runs, qrels: Mapping[str, Mapping[str, int]], doc_ids: Sequence[str]
) -> dict[str, float]:
    """Mean trec_eval metrics (training.eval.evaluate.trec_metrics) of one ranking per query."""
    trec_run = {
        qid: {doc_ids[p]: float(s) for p, s in zip(pos.tolist(), sc.tolist(), strict=True)}
        for qid, (pos, sc) in runs.items()
    }
    per_query = trec_metrics({q: dict(qrels.get(q, {})) for q in trec_run}, trec_run, K_VALUES)
    return {name: statistics.fmean(values.values()) for name, values in per_query.items()}


def fused_runs(dense: Runs, lexical: Runs, params: FusionParams) -> dict[str, Ranking]:
    return {q: fuse(dense[q], lexical[q], params, params.depth) for q in dense}


def runs_for_mode(mode: str, dense: Runs, lexical: Runs, params: FusionParams) -> Runs:
    if mode == "dense":
        return dense
    if mode == "lexical":
        return lexical
    return fused_runs(dense, lexical, params)


def tune(
    dense: Runs,
    lexical: Runs,
    qrels: Mapping[str, Mapping[str, int]],
    doc_ids: Sequence[str],
    *,
    depth: int,
) -> dict[str, Any]:
    """{"default_mode", "fusion": FusionParams record, "validation": every candidate's nDCG@10}."""

    def score(runs: Runs) -> float:
        return round(metrics_of(runs, qrels, doc_ids)[MAIN_METRIC], 4)

    rrf = {
        str(k): score(fused_runs(dense, lexical, FusionParams("rrf", rrf_k=k, depth=depth))) for k in RRF_KS
    }
    conv = {
        str(a): score(fused_runs(dense, lexical, FusionParams("convex", alpha=a, depth=depth)))
        for a in ALPHAS
    }
    best_rrf = max(RRF_KS, key=lambda k: (rrf[str(k)], k == 60))  # ties: the paper's constant
    best_alpha = max(ALPHAS, key=lambda a: (conv[str(a)], -abs(a - 0.5)))  # ties: the most balanced
    if conv[str(best_alpha)] > rrf[str(best_rrf)]:
        params = FusionParams("convex", alpha=best_alpha, depth=depth)
    else:
        params = FusionParams("rrf", rrf_k=float(best_rrf), depth=depth)
    by_mode = {
        "dense": score(dense),
        "lexical": score(lexical),
        "hybrid": max(rrf[str(best_rrf)], conv[str(best_alpha)]),
    }
    default = max(MODES, key=lambda m: by_mode[m])  # ties: the first of dense, lexical, hybrid
    return {
        "default_mode": default,
        "fusion": params.record(),
        "validation": {
            "metric": MAIN_METRIC,
            "n_queries": len(dense),
            "modes": by_mode,
            "rrf_k": rrf,
            "convex_alpha": conv,
        },
    }
