"""The gap report of a query-side version: the tuned query tower against the parent's fixed document
vectors, labelled so (`report.towers`, contract/bundles/report_schema.py).

The report's pool is the indexed corpus, read back from the shared index (no document is encoded); past
`query_report_pool` documents it is every judged document plus a seeded sample of the rest (a note says
so), because the report scores one (anchors × pool) matrix per split.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from contract.bundles.bundle import MODEL_DIR, Bundle
from contract.bundles.report_schema import GapReport
from contract.config import TrainConfig
from contract.encoding.encoder import Encoder
from contract.query_config import QueryRetrainConfig
from training.bundle.portable_paths import relocate_report
from training.data.retrieval_data import RetrievalData
from training.distill.query_loop import LoopResult
from training.distill.query_tower import fixed_vectors

TOWERS_NOTE = (
    "risks of the tuned query tower against the fixed document embeddings of the parent bundle (the "
    "documents were not encoded again: a query-side retrain)"
)


def report_pool(
    live: Bundle, fit: RetrievalData, test: RetrievalData, cap: int, seed: int
) -> tuple[list[str], np.ndarray]:
    """The gap report's pool: every judged document of both splits plus a seeded sample of the rest, at most
    `cap` documents (the whole corpus when it is smaller), with their fixed vectors from the index."""
    position = {d: i for i, d in enumerate(live.doc_ids)}
    judged = {d for q in (*fit.qrels.values(), *test.qrels.values()) for d in q if d in position}
    if len(position) <= cap:
        ids = list(live.doc_ids)
    else:
        rest = np.array([i for i, d in enumerate(live.doc_ids) if d not in judged])
        rng = np.random.default_rng(seed)
        extra: list[int] = []
        if len(rest):
            extra = [
                int(i)
                for i in rng.choice(rest, size=min(len(rest), max(0, cap - len(judged))), replace=False)
            ]
        keep = sorted({position[d] for d in judged} | set(extra))
        ids = [live.doc_ids[i] for i in keep]
    return ids, fixed_vectors(live.index, [position[d] for d in ids])


@dataclass(frozen=True)
class ReportedRetrain:
    """The query-side retrain a report is about: the live bundle it trained against (version `parent`),
    and its configs (the query tower's, and the TrainConfig it takes seed, splits and report flags from)."""

    live: Bundle
    parent: str
    config: QueryRetrainConfig
    train_config: TrainConfig


def write_query_report(
    encoder: Encoder,
    fit: RetrievalData,
    test: RetrievalData,
    loop: LoopResult,
    retrain: ReportedRetrain,
    staging: Path,
) -> None:
    """report/: the gap report of the tuned query tower against the fixed document vectors."""
    if not retrain.train_config.report:
        return
    from training.gap.report import write_report

    k = max(1, round(float(np.mean([r["n_negatives"] for r in loop.log])))) if loop.log else 1
    k_rule = (
        f"mean negatives per query-tower training row over {len(loop.log)} steps (in-batch + mined from the "
        "live index), rounded"
    )
    report = query_gap_report(encoder, fit, test, k, retrain, k_rule)
    write_report(report, staging / "report")
    relocate_report(staging / "report" / "report.json", MODEL_DIR)  # no build-machine path in a bundle


def query_gap_report(
    encoder: Encoder,
    fit: RetrievalData,
    test: RetrievalData,
    k: int,
    retrain: ReportedRetrain,
    k_rule: str = "given by the caller",
) -> GapReport:
    """The gap report of `encoder`'s query tower on (fit, test) against the live bundle's fixed document
    vectors, over report_pool's pool. bench/gap/predictive_validity.py --tower query applies it, unchanged, to
    queries the retrain never saw."""
    from contract.bundles.report_schema import Towers
    from training.gap.report import CorpusVectors, ReportOptions, compute_report

    live, parent, config, train_config = retrain.live, retrain.parent, retrain.config, retrain.train_config
    ids, vectors = report_pool(live, fit, test, config.query_report_pool, train_config.seed)
    keep = set(ids)
    pool_fit = dataclasses.replace(fit, corpus={d: fit.corpus[d] for d in ids if d in fit.corpus})
    pool_test = dataclasses.replace(test, corpus={d: test.corpus[d] for d in ids if d in test.corpus})
    pool_fit = _judged_in(pool_fit, keep)
    pool_test = _judged_in(pool_test, keep)
    options = ReportOptions(
        k=k, k_rule=k_rule, seed=train_config.seed,
        max_test_queries=train_config.eval_max_queries, max_train_queries=train_config.eval_max_queries or 300,
    )  # fmt: skip
    report = compute_report(encoder, pool_fit, pool_test, options, corpus=CorpusVectors(ids, vectors))
    report.towers = Towers(
        query=f"tuned query tower ({config.query_tower}), trained against bundle {parent}'s fixed documents",
        documents=f"the fixed document embeddings of bundle {parent} (model/document/, not re-encoded)",
        note=TOWERS_NOTE,
    )
    report.notes.append(TOWERS_NOTE)
    if len(ids) < len(live.doc_ids):
        report.notes.append(
            f"pool: {len(ids)} of the {len(live.doc_ids)} indexed documents (every judged one plus a seeded "
            f"sample; query_report_pool {config.query_report_pool})"
        )
    return report


def _judged_in(data: RetrievalData, keep: set[str]) -> RetrievalData:
    """`data` without the judgements (and queries left without any) whose documents are not in the pool."""
    qrels = {q: {d: r for d, r in rel.items() if d in keep} for q, rel in data.qrels.items()}
    qrels = {q: rel for q, rel in qrels.items() if rel}
    return dataclasses.replace(
        data, qrels=qrels, queries={q: t for q, t in data.queries.items() if q in qrels}
    )
