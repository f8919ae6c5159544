"""Anchors: one split's (query, positive) pairs as rows of a similarity matrix over the document pool —
what every section of the gap report (risk, R(k) curve, mutual information) is computed from."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class Anchors:
    """(query, positive) pairs of one split as rows into a similarity matrix over the pool."""

    sim: np.ndarray  # (n_anchors, n_pool) learned similarity to every pool document
    pos: np.ndarray  # (n_anchors,) similarity to the positive
    exclude: np.ndarray  # (n_anchors, P) pool columns never drawn as negatives (the query's positives)
    groups: np.ndarray  # (n_anchors,) query index, the bootstrap unit; anchors are stored query by query
    n_queries: int
    pos_col: np.ndarray  # (n_anchors,) pool column of each anchor's positive
