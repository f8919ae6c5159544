"""The collection's relevance judgments as training data: positive pairs, shown-above hard negatives and a
held-out slice, split by query.

The judgment store (contract/feedback/store.py) holds `{query, document_id, grade, above}` rows. A retrain
reads the positive ones (grade > 0), groups them by query text and holds out a seeded share of the queries
(contract.defaults.FEEDBACK_HOLDOUT) to evaluate the candidate and the live model on; the rest become pairs
beside the dataset's (`include`) or instead of them (`only`). The documents shown above a relevant one in the
same search (`above`, judged not relevant or not judged at all) are that query's hard negatives: the ranking
the user corrected, the negatives ANCE (Xiong et al. 2021) mines from the model's own top ranks, here
confirmed by a user; a document judged relevant for the query is never one.

Documents are resolved by id: the dataset's corpus first, then the live bundle's document store, then the
collection's mutation log (a document written through the API since); a judged id none of them holds (deleted
since) is left out and counted.
"""

from __future__ import annotations

import hashlib
import logging
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contract.bundles.bundle import DOCS_FILE
from contract.bundles.folder import BundleFolder
from contract.errors import JobOptionsInvalid
from contract.feedback.store import FeedbackStore
from contract.index.docstore import DocStore
from contract.mutations.log import MutationLog
from training.data.retrieval_data import Document, RetrievalData

logger = logging.getLogger(__name__)

QUERY_PREFIX = "feedback:"  # feedback query ids never collide with a dataset's


@dataclass
class FeedbackSlices:
    """The judged queries split in two, with the documents they need that the dataset lacks."""

    train_queries: dict[str, str] = field(default_factory=dict)  # query id -> text
    train_qrels: dict[str, dict[str, int]] = field(default_factory=dict)
    heldout_queries: dict[str, str] = field(default_factory=dict)
    heldout_qrels: dict[str, dict[str, int]] = field(default_factory=dict)
    negatives: dict[str, list[str]] = field(default_factory=dict)  # training query id -> shown-above ids
    docs: dict[str, Document] = field(default_factory=dict)  # resolved outside the dataset's corpus
    n_judgments: int = 0  # positive judgments read
    n_unresolved: int = 0  # judged documents no source holds any more

    @property
    def n_train_pairs(self) -> int:
        return sum(len(r) for r in self.train_qrels.values())

    def summary(self) -> dict[str, Any]:
        return {
            "positive_judgments": self.n_judgments,
            "train_queries": len(self.train_queries),
            "train_pairs": self.n_train_pairs,
            "heldout_queries": len(self.heldout_queries),
            "heldout_pairs": sum(len(r) for r in self.heldout_qrels.values()),
            "hard_negatives": sum(len(n) for n in self.negatives.values()),
            "unresolved_documents": self.n_unresolved,
        }


def query_id(text: str) -> str:
    return QUERY_PREFIX + hashlib.sha1(text.encode("utf-8")).hexdigest()[:16]


def read_slices(
    bundles_dir: str | Path, corpus: dict[str, Document], *, seed: int, holdout: float
) -> FeedbackSlices:
    """The positive judgments of the collection in `bundles_dir`, split by query (seeded)."""
    judgments = FeedbackStore.reader(bundles_dir).judgments()
    positives: dict[str, set[str]] = {}
    shown_above: dict[str, list[str]] = {}
    n_positive = 0
    for j in judgments:
        if j.grade <= 0:
            continue
        n_positive += 1
        positives.setdefault(j.query, set()).add(j.doc_id)
        above = shown_above.setdefault(j.query, [])
        above += [d for d in j.above if d not in above]
    resolver = _Resolver(Path(bundles_dir), corpus)
    slices = FeedbackSlices(n_judgments=n_positive)
    qrels: dict[str, dict[str, int]] = {}
    texts: dict[str, str] = {}
    negatives: dict[str, list[str]] = {}
    for text, docs in positives.items():
        kept = {d: 1 for d in sorted(docs) if resolver.resolve(d)}
        slices.n_unresolved += len(docs) - len(kept)
        if not kept:
            continue
        qid = query_id(text)
        texts[qid], qrels[qid] = text, kept
        # never a document judged relevant for this query, even one judged so in another search
        negatives[qid] = [d for d in shown_above[text] if d not in docs and resolver.resolve(d)]
    held = _held_out(sorted(qrels), seed, holdout)
    for qid in sorted(qrels):
        if qid in held:
            slices.heldout_queries[qid], slices.heldout_qrels[qid] = texts[qid], qrels[qid]
        else:
            slices.train_queries[qid], slices.train_qrels[qid] = texts[qid], qrels[qid]
            if negatives[qid]:
                slices.negatives[qid] = negatives[qid]
    slices.docs = resolver.found
    logger.info("feedback: %s", slices.summary())
    return slices


def _held_out(ids: list[str], seed: int, holdout: float) -> set[str]:
    """A seeded `holdout` share of the query ids; none below two queries, never all of them."""
    if len(ids) < 2 or holdout <= 0.0:
        return set()
    n = min(len(ids) - 1, max(1, round(holdout * len(ids))))
    return set(random.Random(f"feedback:{seed}").sample(ids, n))


class _Resolver:
    """Document ids to documents: the dataset's corpus, the live bundle's store, the mutation log."""

    def __init__(self, bundles_dir: Path, corpus: dict[str, Document]):
        self.corpus = corpus
        self.found: dict[str, Document] = {}
        self.missing: set[str] = set()
        self.bundles_dir = bundles_dir
        self._store: tuple[DocStore, dict[str, int]] | None = None
        self._log = MutationLog(bundles_dir)

    def resolve(self, doc_id: str) -> bool:
        if doc_id in self.corpus or doc_id in self.found:
            return True
        if doc_id in self.missing:
            return False
        doc = self._from_log(doc_id) or self._from_bundle(doc_id)
        if doc is None:
            self.missing.add(doc_id)
            return False
        self.found[doc_id] = doc
        return True

    def _from_log(self, doc_id: str) -> Document | None:
        # the log first: a document rewritten through the API since the bundle was built is read as it is now
        last = self._log.last_write(doc_id)
        if last is None or last.op == "delete":
            return None
        return Document(doc_id, last.title or "", last.text or "", dict(last.metadata or {}))

    def _from_bundle(self, doc_id: str) -> Document | None:
        if self._store is None:
            version = BundleFolder(self.bundles_dir).current_version()
            if version is None:
                return None
            store = DocStore(self.bundles_dir / version / DOCS_FILE)
            self._store = (store, {d: i for i, d in enumerate(store.ids())})
        store, position = self._store
        if doc_id not in position:
            return None
        (row,) = store.get([position[doc_id]])
        return Document(doc_id, row["title"] or "", row["text"] or "", dict(row["metadata"] or {}))


def with_feedback(train: RetrievalData, slices: FeedbackSlices, use: str) -> RetrievalData:
    """The training split with the feedback training slice: beside the dataset's pairs (include) or alone
    (only); the corpus gains the judged documents it lacked."""
    if use == "only" and not slices.train_queries:
        raise JobOptionsInvalid("feedback", "only, but no judged query is left to train on")
    corpus = train.corpus | {d: doc for d, doc in slices.docs.items() if d not in train.corpus}
    queries = dict(slices.train_queries) if use == "only" else train.queries | slices.train_queries
    qrels = dict(slices.train_qrels) if use == "only" else train.qrels | slices.train_qrels
    return RetrievalData(
        corpus=corpus,
        queries=queries,
        qrels=qrels,
        source=f"{train.source} + feedback ({use})",
        negatives=dict(slices.negatives),
    )


def heldout_split(evaluation: RetrievalData, slices: FeedbackSlices) -> RetrievalData:
    """The held-out judged queries over the evaluation corpus (plus the judged documents it lacked)."""
    corpus = evaluation.corpus | {d: doc for d, doc in slices.docs.items() if d not in evaluation.corpus}
    return RetrievalData(
        corpus=corpus,
        queries=dict(slices.heldout_queries),
        qrels={q: dict(r) for q, r in slices.heldout_qrels.items()},
        source="feedback (held out)",
    )
