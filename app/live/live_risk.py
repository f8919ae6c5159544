"""The `live` section of GET /generalization-gap: the InfoNCE risk on the positive judgments of the live
version (contract/feedback/live_risk.py), scored by the live encoder against the live index's documents,
beside the risk the report predicted for unseen queries.

The pool is the published bundle's documents (the report's population of negatives); a judgment about a
document written after publication (mutation log) is left out, as is a query whose positives cover the
pool. The answer is cached per (version, judgment count): a GET re-encodes only after new judgments.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import numpy as np

from app.engine.live_bundle import LiveBundle
from contract.feedback import live_risk
from contract.feedback.store import FeedbackStore, Judgment

logger = logging.getLogger(__name__)
_cache: dict[tuple[str, str, int], dict[str, Any]] = {}
_lock = threading.Lock()
CACHE_ENTRIES = 16


def live_section(live: LiveBundle, store: FeedbackStore) -> dict[str, Any]:
    """The section, from the cache when the version's judgment count has not changed."""
    count = store.count(live.version)
    key = (str(store.path), live.version, count)
    with _lock:
        if key in _cache:
            return _cache[key]
    section = _compute(live, store.judgments(live.version))
    with _lock:
        if len(_cache) >= CACHE_ENTRIES:
            _cache.pop(next(iter(_cache)))
        _cache[key] = section
    return section


def _anchors(live: LiveBundle, judgments: list[Judgment]) -> dict[str, list[int]]:
    """Pool columns of each query's positively judged documents (grade > 0), in first-seen query order."""
    column = {d: i for i, d in enumerate(live.bundle.doc_ids)}
    by_query: dict[str, list[int]] = {}
    for j in judgments:
        if j.grade > 0 and j.doc_id in column:
            cols = by_query.setdefault(j.query, [])
            if column[j.doc_id] not in cols:
                cols.append(column[j.doc_id])
    n_pool = len(column)
    return {q: c for q, c in by_query.items() if len(c) < n_pool}


def _compute(live: LiveBundle, judgments: list[Judgment]) -> dict[str, Any]:
    report = live.bundle.report
    predicted = None if report is None else report.risk_test
    anchors = _anchors(live, judgments)
    out: dict[str, Any] = {
        "n_judgments": len(judgments),
        "n_queries": len(anchors),
        "min_queries": live_risk.MIN_QUERIES,
        "predicted": None if predicted is None else predicted.model_dump(mode="json"),
    }
    if len(anchors) < live_risk.MIN_QUERIES or report is None or predicted is None:
        out["verdict"] = "not enough judgments yet" if report is not None else "no report to compare with"
        return out
    queries = list(anchors)
    sim = _similarity(live, queries)  # (q, N)
    k, tau = report.k, live.encoder.similarity.logit_divisor()
    rows, pos, allowed, groups = [], [], [], []
    n_pool = sim.shape[1]
    for qi, q in enumerate(queries):
        free = np.setdiff1d(np.arange(n_pool), anchors[q])
        for c in anchors[q]:
            rows.append(qi)
            pos.append(sim[qi, c])
            allowed.append(free)
            groups.append(qi)
    losses = live_risk.p1_losses(sim[rows], np.asarray(pos), allowed, k, tau, np.random.default_rng(0))
    risk = live_risk.risk_with_ci(losses, np.asarray(groups), seed=1)
    mrr, ndcg = live_risk.rank_metrics(sim, [np.asarray(anchors[q]) for q in queries])
    out |= {
        "risk": {
            "value": risk.value,
            "ci_low": risk.ci_low,
            "ci_high": risk.ci_high,
            "level": live_risk.LEVEL,
        },
        "n_anchors": risk.n_anchors,
        "k": k,
        "temperature": tau,
        "verdict": live_risk.verdict(risk, predicted.ci_low, predicted.ci_high),
        "rule": "95% intervals overlap: consistent; live interval wholly above the predicted one: worse "
        "than predicted; wholly below: better than predicted",
        "mrr": mrr,
        "ndcg_at_10": ndcg,
    }
    return out


def _similarity(live: LiveBundle, queries: list[str]) -> np.ndarray:
    """The model's similarity (q, N) of each query to every published document, in index space."""
    q = np.asarray(live.encode(queries), dtype=np.float64)  # (q, dim)
    docs = live.bundle.index.exact_vectors(np.arange(live.bundle.index.ntotal)).astype(np.float64)  # (N, dim)
    similarity = live.encoder.similarity
    if similarity.index_metric == "l2":
        raw = (q**2).sum(1)[:, None] + (docs**2).sum(1)[None, :] - 2.0 * q @ docs.T
    else:
        raw = q @ docs.T
    return np.asarray(similarity.index_scores(raw))
