"""A validation split carved from the *training* queries: model selection never looks at the test split.

The pipeline holds out a seeded share of the training queries (`TrainConfig.validation_fraction`): the
encoder is fine-tuned on the rest, and the held-out queries choose what the bundle serves (the retrieval
mode and its fusion parameters, training.fusion_tuning) and the default training recipe
(bench/recipe_search.py). The carve depends only on the query ids, the fraction and the seed, so
`python -m training index` re-creates the very split a run was trained without.
"""

from __future__ import annotations

import random

from training.retrieval_data import RetrievalData


def carve_validation(data: RetrievalData, fraction: float, seed: int) -> tuple[RetrievalData, RetrievalData]:
    """(fit, validation): a seeded `fraction` of data's queries (with their qrels) held out.

    Both sides keep the whole corpus. With fraction 0, or fewer than two queries, validation is empty
    (no queries) and fit is `data` itself. Otherwise each side has at least one query.
    """
    ids = sorted(data.queries)
    if fraction <= 0.0 or len(ids) < 2:
        return data, RetrievalData(corpus=data.corpus, queries={}, qrels={}, source=data.source)
    n_val = min(len(ids) - 1, max(1, round(fraction * len(ids))))
    held = set(random.Random(f"validation:{seed}").sample(ids, n_val))

    def side(keep: bool) -> RetrievalData:
        return RetrievalData(
            corpus=data.corpus,
            queries={q: t for q, t in data.queries.items() if (q in held) == keep},
            qrels={q: dict(r) for q, r in data.qrels.items() if (q in held) == keep},
            source=data.source,
        )

    return side(False), side(True)
