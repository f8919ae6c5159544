"""A validation split carved from the *training* queries: model selection never looks at the test split.

The pipeline holds out a seeded share of the training queries (`TrainConfig.validation_fraction`): the
encoder is fine-tuned on the rest, and the held-out queries choose what the bundle serves (the retrieval
mode and its fusion parameters, training.hybrid.fusion_tuning) and the default training recipe
(bench/training/recipe_search.py). The carve depends only on the qrels, the fraction and the seed, so
`python -m training index` re-creates the very split a run was trained without.

Queries that share a relevant document are held out together or not at all. A held-out query whose
document is also a positive of a query trained on rewards memorising training positives, which no test
query of a BEIR split can (docs/bench-retired.md, carve_overlap: on scifact, a carve of single queries put 69 of its
107 validation queries in that position and none of the 300 test queries; the recipe it chose, lr 1e-4,
won on validation and lost on test, bench/results/recipe_search.json). When no such carve exists (every
query in one group, or every group larger than the share), it falls back to single queries and says so.
"""

from __future__ import annotations

import logging
import random

from training.data.retrieval_data import RetrievalData

logger = logging.getLogger(__name__)


def carve_validation(data: RetrievalData, fraction: float, seed: int) -> tuple[RetrievalData, RetrievalData]:
    """(fit, validation): about a seeded `fraction` of data's queries (with their qrels) held out, whole
    groups of queries that share a relevant document at a time (never more than the fraction's count).

    Both sides keep the whole corpus. With fraction 0, or fewer than two queries, validation is empty
    (no queries) and fit is `data` itself. Otherwise each side has at least one query.
    """
    ids = sorted(data.queries)
    if fraction <= 0.0 or len(ids) < 2:
        return data, RetrievalData(corpus=data.corpus, queries={}, qrels={}, source=data.source)
    n_val = min(len(ids) - 1, max(1, round(fraction * len(ids))))
    rng = random.Random(f"validation:{seed}")
    held = _whole_groups(document_groups(data, ids), n_val, rng)
    if not held:
        logger.warning(
            "validation carve: no set of whole query groups (queries sharing a relevant document) makes "
            "%d of %d queries; holding out single queries, so validation may reward memorised positives",
            n_val,
            len(ids),
        )
        held = set(rng.sample(ids, n_val))

    def side(keep: bool) -> RetrievalData:
        return RetrievalData(
            corpus=data.corpus,
            queries={q: t for q, t in data.queries.items() if (q in held) == keep},
            qrels={q: dict(r) for q, r in data.qrels.items() if (q in held) == keep},
            source=data.source,
            negatives={q: list(n) for q, n in data.negatives.items() if (q in held) == keep},
        )

    return side(False), side(True)


def document_groups(data: RetrievalData, ids: list[str]) -> list[list[str]]:
    """The queries in `ids` grouped by shared relevant documents (connected components), in a
    deterministic order: each group sorted, groups by their first id."""
    parent: dict[str, str] = {}

    def root(x: str) -> str:
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for q in ids:
        root(f"q:{q}")
        for doc, grade in data.qrels.get(q, {}).items():
            if grade > 0:
                parent[root(f"d:{doc}")] = root(f"q:{q}")
    groups: dict[str, list[str]] = {}
    for q in ids:
        groups.setdefault(root(f"q:{q}"), []).append(q)
    return sorted(groups.values(), key=lambda g: g[0])


def _whole_groups(groups: list[list[str]], n_val: int, rng: random.Random) -> set[str]:
    """Groups in seeded order, each taken when it still fits in `n_val`; empty when none fits or when
    they would all be taken (then nothing is left to fit on)."""
    if len(groups) < 2:
        return set()
    held: set[str] = set()
    for group in rng.sample(groups, len(groups)):
        if len(held) + len(group) <= n_val:
            held.update(group)
        if len(held) == n_val:
            break
    return held
