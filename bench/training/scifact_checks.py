"""Checks that need the scifact benchmark itself (../shared/data/scifact), moved out of the test suite.

    .venv/bin/python -m bench scifact_checks [--data ../shared/data/scifact]

The test suite runs on the project's own dataset (tests/conftest.py: the standard library's docstrings),
so a clone with nothing beside it checks everything; what is left here asserts scifact's own numbers:

1. the loader reads scifact exactly: 5,183 documents, 300 test queries with 339 judgements, 537 train
   queries giving 609 (query, positive) pairs, disjoint query sets (BEIR's published counts);
2. the base all-MiniLM-L6-v2 on a seeded 30-query test slice with 120 distractors scores far above a
   random ranking (nDCG@10 ~0.03 for ~155 documents; the base model scores ~0.87; the check asks > 0.4).

Prints one line per check and exits 1 if any fails, 2 if the dataset is missing.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from bench.harness.paths import SCIFACT
from contract.encoding.encoder import Encoder
from training.data.beir import load_beir
from training.data.query_sample import subset
from training.data.retrieval_data import training_pairs
from training.eval.evaluate import evaluate


def counts(data_dir: Path) -> list[str]:
    """The failures of check 1 (empty when the counts are scifact's)."""
    test, train = load_beir(data_dir, "test"), load_beir(data_dir, "train")
    seen = {
        "documents": (len(test.corpus), 5183),
        "test queries": (len(test.queries), 300),
        "test judgements": (sum(len(r) for r in test.qrels.values()), 339),
        "train queries": (len(train.queries), 537),
        "train pairs": (len(training_pairs(train)), 609),
        "queries shared by train and test": (len(set(train.queries) & set(test.queries)), 0),
    }
    print("counts: " + ", ".join(f"{name} {got}" for name, (got, _) in seen.items()), flush=True)
    failures = [f"{name}: {got}, expected {want}" for name, (got, want) in seen.items() if got != want]
    if train.corpus.keys() != test.corpus.keys():
        failures.append("the train and test splits read different corpora")
    return failures


def slice_quality(data_dir: Path) -> list[str]:
    """The failures of check 2."""
    data = subset(load_beir(data_dir, "test"), n_queries=30, n_distractors=120, seed=0)
    metrics = evaluate(Encoder.load(), data, batch_size=32, show_progress=False).metrics
    print(
        f"base model on a 30-query slice ({len(data.corpus)} documents): nDCG@10 {metrics['ndcg@10']:.3f}, "
        f"recall@1 {metrics['recall@1']:.3f}, recall@10 {metrics['recall@10']:.3f}",
        flush=True,
    )
    failures = []
    if not metrics["recall@100"] >= metrics["recall@10"] >= metrics["recall@1"]:
        failures.append("recall@k is not monotone in k")
    if metrics["ndcg@10"] <= 0.4:
        failures.append(f"nDCG@10 {metrics['ndcg@10']:.3f} <= 0.4 (random ranking gives ~0.03)")
    return failures


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING)
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, default=SCIFACT, help="the scifact BEIR folder")
    args = ap.parse_args(argv)
    if not (args.data / "corpus.jsonl").exists():
        print(f"scifact_checks: {args.data / 'corpus.jsonl'} is missing", file=sys.stderr)
        return 2
    failures = counts(args.data) + slice_quality(args.data)
    for failure in failures:
        print(f"FAIL: {failure}", flush=True)
    print("scifact checks: " + ("FAIL" if failures else "ok"), flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
