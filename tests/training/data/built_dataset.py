"""The checks every corpus builder's dataset passes (man pages, code search, Debian packages): the same
seed writes the same bytes, and the train and test splits are disjoint with the sizes asked for."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from training.data.beir import load_beir

FILES = ("corpus.jsonl", "queries.jsonl", "qrels/train.tsv", "qrels/test.tsv")


def seeded_disjoint_identical(build: Callable[..., Path], tmp_path: Path, **source: Any) -> dict[str, Any]:
    """Build twice with seed 1 (30 documents, 10 test queries): byte-identical, disjoint splits of 20 and 10.
    Returns the first corpus row for the builder's own checks."""
    out = build(tmp_path / "a", n_docs=30, n_test=10, seed=1, **source)
    again = build(tmp_path / "b", n_docs=30, n_test=10, seed=1, **source)
    for name in FILES:
        assert (out / name).read_bytes() == (again / name).read_bytes(), name
    train, test = load_beir(out, "train"), load_beir(out, "test")
    assert len(train.queries) == 20 and len(test.queries) == 10
    assert not set(train.queries) & set(test.queries)
    return json.loads((out / "corpus.jsonl").read_text().splitlines()[0])
