"""Does the validation carve resemble the test split? Shared relevant documents with the training queries.

    .venv/bin/python bench/carve_overlap.py [--fraction 0.2 --seed 0]

Counts the validation queries (training.data.validation_carve's carve of scifact's qrels/train.tsv) and the test
queries (qrels/test.tsv) that have a relevant document which is also a positive of a query trained on.
Only qrels are read (no model, no scores). A validation query that shares its document with a training
query rewards memorising training positives, which no test query can, so a carve with many of them is
an optimistic and biased proxy for test (bench/results/recipe_search.json: lr 1e-4 won on validation).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from training.data.beir import load_beir
from training.data.retrieval_data import RetrievalData
from training.data.validation_carve import carve_validation

SCIFACT = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "scifact"


def sharing(data: RetrievalData, trained_docs: set[str]) -> tuple[int, int]:
    """(queries with a relevant document in trained_docs, queries)."""
    hits = sum(1 for rel in data.qrels.values() if any(d in trained_docs for d in rel))
    return hits, len(data.qrels)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--fraction", type=float, default=0.2)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    fit, val = carve_validation(load_beir(SCIFACT, "train"), args.fraction, args.seed)
    trained_docs = {d for rel in fit.qrels.values() for d in rel}
    for name, data in (("validation", val), ("test", load_beir(SCIFACT, "test"))):
        hits, n = sharing(data, trained_docs)
        print(f"{name}: {hits} / {n} queries share a relevant document with the training queries")


if __name__ == "__main__":
    main()
