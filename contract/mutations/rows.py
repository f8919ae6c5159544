"""What the mutation log holds (contract/mutations/log.py): a row (Mutation), an upsert before it has a
seq (NewDocument), one API replica's recorded state (ReplicaState), and the two keys that tie rows to
bundles: the seq a bundle's manifest says it folded in, and the identity of the encoder that made a
row's vector.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

Op = Literal["upsert", "delete"]


@dataclass(frozen=True)
class Mutation:
    """One row: an upsert (with the document and, usually, its vector) or a delete of `doc_id`."""

    seq: int
    op: Op
    doc_id: str
    title: str = ""
    text: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)
    encoder_key: str | None = None
    vector: np.ndarray | None = None  # (dim,) float32, index space of `encoder_key`'s encoder
    at: float = 0.0


@dataclass(frozen=True)
class NewDocument:
    """An upsert before it has a seq."""

    id: str
    title: str
    text: str
    metadata: dict[str, Any]


@dataclass(frozen=True)
class ReplicaState:
    replica: str
    version: str | None
    applied_seq: int
    delta_docs: int
    tombstones: int
    updated_at: float


def encoder_key(files: Mapping[str, str]) -> str:
    """Identity of a bundle's document encoder: sha256 over the checksums of its model/ files
    (manifest.files). A two-tower model's documents are its model/document/ folder's (the parent
    bundle's model/, hard-linked by a query-side retrain), so its key is the parent's and the log's
    vectors stay valid for it."""
    tower = "model/document/"
    if any(k.startswith(tower) for k in files):
        model = sorted(("model/" + k.removeprefix(tower), v) for k, v in files.items() if k.startswith(tower))
    else:
        model = sorted((k, v) for k, v in files.items() if k.startswith("model/"))
    return hashlib.sha256(json.dumps(model).encode()).hexdigest()[:16]


def latest_per_document(entries: Iterable[Mutation]) -> dict[str, Mutation]:
    """The net effect of a run of rows: the last row per document id, in order of that last write."""
    net: dict[str, Mutation] = {}
    for m in entries:
        net.pop(m.doc_id, None)
        net[m.doc_id] = m
    return net
