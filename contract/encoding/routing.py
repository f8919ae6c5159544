"""Per-query routing: a cheap query encoder's answer is kept when it is confident, else the full model's.

Confidence is the margin between the cheap encoder's best and second-best document scores in the
bundle's own index (`top2_margins`): a query whose top two documents score nearly alike is one where a
small error in the query vector changes the answer, so it is the one worth the full model's cost. The
bundle records, per distilled variant, the curve of that trade on its evaluation queries (measured by
training.distill.bundle_step with the full model's vectors for the routed queries):

    extras["query_encoders"]["variants"][<variant>]["routing"] = {
        "n_queries": n,
        "curve": [{"share", "margin", "ndcg@10", "ndcg_loss"}, ...]   # share routed ascending
    }

where a query is routed when its margin is below `margin`. The API (app/engine/query_routing.py) serves
the smallest share whose recorded nDCG@10 loss is within its budget. Routed queries go to the fastest
full-model backend the bundle serves within the budget (torch, ONNX fp32 or int8): the curve is measured
with the full model itself, so an int8 fallback adds its own (recorded, small) loss on the routed share.

Contract module: numpy only; `index` is anything with VectorIndex's `search(queries, k)`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

EXTRAS_KEY = "query_encoders"
ROUTED_SUFFIX = "-routed"  # backend name of a routed variant: static-routed, distilled-routed
NO_MARGIN = 2.0  # cosine margins lie in [0, 2]: a threshold above every margin routes every query


def top2_margins(index: Any, queries: np.ndarray) -> np.ndarray:
    """(n,) best minus second-best score of each index-space query (n, D) in `index`; a query with fewer
    than two results is fully confident (NO_MARGIN)."""
    rows = index.search(queries, 2)
    return np.array([float(s[0] - s[1]) if len(s) >= 2 else NO_MARGIN for _, s in rows], dtype=np.float32)


def routing_curve(
    margins: np.ndarray, cheap: Sequence[float], full: Sequence[float], *, points: int = 40
) -> list[dict[str, float]]:
    """The record's curve from per-query margins and nDCG@10 of the cheap and full encoders (same order).

    Point j routes the k_j least confident queries (k_j on a grid of about `points` steps, plus every k up
    to the first that matches the full model); `margin` is a threshold that routes exactly those."""
    n = len(margins)
    if n == 0:
        return []
    order = np.argsort(margins, kind="stable")  # least confident first
    m = np.asarray(margins, dtype=np.float64)[order]
    c = np.asarray(cheap, dtype=np.float64)[order]
    f = np.asarray(full, dtype=np.float64)[order]
    full_mean = float(f.mean())
    # mixed[k] = nDCG@10 with the k least confident queries answered by the full model
    mixed = (np.concatenate([[0.0], np.cumsum(f)]) + c.sum() - np.concatenate([[0.0], np.cumsum(c)])) / n
    step = max(1, n // points)
    ks = sorted({*range(0, n + 1, step), n})
    curve = []
    for k in ks:
        if k == 0:
            threshold = 0.0
        elif k == n:
            threshold = NO_MARGIN
        else:
            threshold = float((m[k - 1] + m[k]) / 2) if m[k] > m[k - 1] else float(m[k - 1])
        curve.append(
            {
                "share": round(k / n, 4),
                "margin": round(threshold, 6),
                "ndcg@10": round(float(mixed[k]), 6),
                "ndcg_loss": round(full_mean - float(mixed[k]), 6),
            }
        )
    return curve


def routing_record(extras: Mapping[str, Any] | None, variant: str) -> dict[str, Any] | None:
    """The recorded routing of a distilled variant (None: not recorded, e.g. an older bundle)."""
    record = ((extras or {}).get(EXTRAS_KEY) or {}).get("variants", {}).get(variant) or {}
    routing = record.get("routing")
    return routing if isinstance(routing, dict) and routing.get("curve") else None


def operating_point(routing: Mapping[str, Any], max_ndcg_loss: float) -> dict[str, float] | None:
    """The smallest recorded share routed whose nDCG@10 loss is within `max_ndcg_loss` (None: none is)."""
    for point in routing.get("curve") or []:
        if float(point["ndcg_loss"]) <= max_ndcg_loss:
            return dict(point)
    return None
