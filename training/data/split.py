"""Where training reads its data: `load_split` (a BEIR folder's split or a pairs file's side).

The readers live one concept per module:

- training/data/retrieval_data.py  Document, RetrievalData, Pair; `training_pairs`
- training/data/line_reader.py     numbered, decoded JSONL/TSV lines with errors naming file, line, field
- training/data/beir.py            BEIR folders (corpus.jsonl, queries.jsonl, qrels/<split>.tsv) and their rules
- training/data/pairs_file.py      pairs files and `pairs_as_retrieval` (train/test split by query)
- training/data/query_sample.py    `sample_queries`, the one seeded query sampler; `subset`
"""

from __future__ import annotations

from pathlib import Path

from contract.errors import DataError
from training.data.beir import load_beir
from training.data.pairs_file import load_pairs_file, pairs_as_retrieval
from training.data.retrieval_data import RetrievalData


def load_split(
    path: str | Path, split: str, *, holdout_fraction: float = 0.1, seed: int = 0
) -> RetrievalData:
    """A BEIR folder's split, or for a pairs file its "train" or "test" side (`pairs_as_retrieval`)."""
    path = Path(path)
    if path.is_dir():
        return load_beir(path, split)
    if split not in ("train", "test"):
        raise DataError(path, f"a pairs file has only the splits 'train' and 'test', not {split!r}")
    train, test = pairs_as_retrieval(
        load_pairs_file(path), holdout_fraction=holdout_fraction, seed=seed, source=str(path)
    )
    return train if split == "train" else test
