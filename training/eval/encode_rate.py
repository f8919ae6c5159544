"""How fast an encoder encodes documents here and now: timed after a warm-up, on a seeded sample of the
corpus. The corpus-encoder race times its candidates this way (training/export/corpus_encoder.py), and a
time budget estimates the corpus encode with it before training (training/train/budget.py)."""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from contract.encoding.encoder import Encoder, document_text
from training.data.retrieval_data import RetrievalData

SAMPLE_DOCS = 64  # ~1-2 s of MiniLM-L6 on 2 cores: enough for a rate, cheap beside any corpus encode


def timed(run: Callable[[list[str]], np.ndarray], texts: list[str]) -> tuple[np.ndarray, float]:
    """(vectors, docs/s) of `run` over `texts`, after an untimed warm-up on a few of them."""
    run(texts[:8])
    started = time.perf_counter()
    vectors = run(texts)
    return vectors, len(texts) / max(time.perf_counter() - started, 1e-9)


def docs_per_s(encoder: Encoder, data: RetrievalData, seed: int, n: int = SAMPLE_DOCS) -> float:
    """Documents per second of `encoder` (torch) on a seeded sample of `data.corpus`."""
    ids = list(data.corpus)
    sample = [ids[i] for i in np.random.default_rng(seed).permutation(len(ids))[:n]]
    texts = [document_text(data.corpus[d].title, data.corpus[d].text) for d in sample]
    return timed(lambda t: encoder.encode(t, kind="document"), texts)[1]
