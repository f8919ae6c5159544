"""The served encoder's risk: paired with the full encoder's (same anchors, same negatives)."""

from __future__ import annotations

import numpy as np
import pytest

from contract.encoding.similarity import Similarity
from training.gap.served_risk import served_risks


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_same_vectors_differ_by_exactly_zero_and_noisy_ones_cost_risk():
    rng = np.random.default_rng(0)
    docs = _unit(rng.standard_normal((200, 16)))
    doc_ids = [f"d{i}" for i in range(200)]
    qids = [f"q{i}" for i in range(40)]
    qrels = {q: {f"d{i}": 1} for i, q in enumerate(qids)}
    full = _unit(docs[:40] + 0.3 * rng.standard_normal((40, 16)))  # near their positives
    noisy = _unit(full + 1.5 * rng.standard_normal((40, 16)))
    out = served_risks(
        {"full": full, "same": full.copy(), "noisy": noisy}, docs, qids, qrels, doc_ids,
        similarity=Similarity(metric="cosine", temperature=0.1), n_negatives=15,
    )  # fmt: skip
    assert out["n_anchors"] == 40 and out["k"] == 15
    assert out["same"]["delta_vs_full"]["value"] == 0.0
    assert out["same"]["risk_test"] == out["full"]["risk_test"]
    delta = out["noisy"]["delta_vs_full"]
    assert delta["ci_low"] > 0  # clearly worse, and the paired CI says so
    assert delta["value"] == pytest.approx(
        out["noisy"]["risk_test"]["value"] - out["full"]["risk_test"]["value"]
    )
