"""Write a small seeded slice of a BEIR folder: real queries, their relevant documents and seeded
distractors, so a run on real data is fast (the test suite's slices of the demo dataset, the benches' of
scifact)."""

from __future__ import annotations

import json
from pathlib import Path

from training.data.beir import load_beir
from training.data.query_sample import subset
from training.data.retrieval_data import RetrievalData


def write_beir(folder: Path, splits: dict[str, RetrievalData]) -> Path:
    """One corpus.jsonl / queries.jsonl for all splits (their union), plus qrels/<split>.tsv each."""
    (folder / "qrels").mkdir(parents=True, exist_ok=True)
    corpus = {did: doc for data in splits.values() for did, doc in data.corpus.items()}
    queries = {qid: text for data in splits.values() for qid, text in data.queries.items()}
    with (folder / "corpus.jsonl").open("w") as f:
        for doc in corpus.values():
            f.write(json.dumps({"_id": doc.id, "title": doc.title, "text": doc.text}) + "\n")
    with (folder / "queries.jsonl").open("w") as f:
        for qid, text in queries.items():
            f.write(json.dumps({"_id": qid, "text": text}) + "\n")
    for split, data in splits.items():
        lines = ["query-id\tcorpus-id\tscore"]
        lines += [f"{q}\t{d}\t{s}" for q, rel in data.qrels.items() for d, s in rel.items()]
        (folder / "qrels" / f"{split}.tsv").write_text("\n".join(lines) + "\n")
    return folder


def beir_slice(
    source: Path, folder: Path, *, n_train: int = 16, n_test: int = 8, n_distractors: int = 40
) -> Path:
    train = subset(load_beir(source, "train"), n_queries=n_train, n_distractors=n_distractors, seed=0)
    test = subset(load_beir(source, "test"), n_queries=n_test, n_distractors=n_distractors, seed=1)
    return write_beir(folder, {"train": train, "test": test})
