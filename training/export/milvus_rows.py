"""The rows of a bundle's Milvus collection: which metadata keys become typed scalar fields, the
collection schema (contract/milvus/index.py names the fields), and the insert rows of one chunk."""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from contract.milvus.index import ID_FIELD, META_FIELD, POS_FIELD, TYPED_PREFIX, VECTOR_FIELD

if TYPE_CHECKING:
    from training.data.retrieval_data import Document

MAX_TYPED_FIELDS = 32  # Milvus caps a collection at 64 fields; the rest stay reachable through the JSON field
MAX_VARCHAR = 65_535
KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,60}$")
# rows per insert: with the chunk's protobuf message, the only copy of vectors the builder holds
CHUNK_ROWS = 1024


def typed_fields(metadatas: Iterable[Mapping[str, Any] | None]) -> dict[str, dict[str, str]]:
    """{key: {"field": "m_key", "type": BOOL|INT64|DOUBLE|VARCHAR, "max_length"?}} for the metadata keys
    whose values are one scalar type in every document that has them (int and float together = DOUBLE)."""
    kinds: dict[str, set[str]] = {}
    counts: Counter[str] = Counter()
    longest: dict[str, int] = {}
    for meta in metadatas:
        for key, value in (meta or {}).items():
            if value is None:
                continue
            counts[key] += 1
            kinds.setdefault(key, set()).add(_scalar_type(value))
            if isinstance(value, str):
                longest[key] = max(longest.get(key, 1), len(value.encode("utf-8")))
    out: dict[str, dict[str, str]] = {}
    for key, _ in counts.most_common():
        found = kinds[key]
        if "other" in found or not KEY_RE.match(key) or len(out) >= MAX_TYPED_FIELDS:
            continue
        if found == {"INT64", "DOUBLE"}:
            found = {"DOUBLE"}
        if len(found) != 1:
            continue
        (kind,) = found
        if kind == "VARCHAR" and longest[key] > MAX_VARCHAR:
            continue
        out[key] = {"field": TYPED_PREFIX + key, "type": kind}
        if kind == "VARCHAR":
            out[key]["max_length"] = str(longest[key])
    return out


def _scalar_type(value: Any) -> str:
    if isinstance(value, bool):
        return "BOOL"
    if isinstance(value, int):
        return "INT64" if -(2**63) <= value < 2**63 else "other"
    if isinstance(value, float):
        return "DOUBLE" if math.isfinite(value) else "other"
    if isinstance(value, str):
        return "VARCHAR"
    return "other"


def schema(client: Any, dim: int, id_length: int, fields: Mapping[str, Mapping[str, str]]) -> Any:
    from pymilvus import DataType

    schema = client.create_schema(auto_id=False, enable_dynamic_field=False)
    schema.add_field(
        ID_FIELD, DataType.VARCHAR, is_primary=True, max_length=max(1, min(id_length, MAX_VARCHAR))
    )
    schema.add_field(POS_FIELD, DataType.INT64)
    schema.add_field(VECTOR_FIELD, DataType.FLOAT_VECTOR, dim=dim)
    for spec in fields.values():
        extra = {"max_length": int(spec["max_length"])} if spec["type"] == "VARCHAR" else {}
        schema.add_field(spec["field"], getattr(DataType, spec["type"]), nullable=True, **extra)
    schema.add_field(META_FIELD, DataType.JSON)
    return schema


def rows(
    ids: list[str], docs: Mapping[str, Document], vectors: np.ndarray, start: int, fields: Mapping[str, Any]
) -> list[dict[str, Any]]:
    out = []
    for pos in range(start, min(start + CHUNK_ROWS, len(ids))):
        meta = docs[ids[pos]].metadata or {}
        row: dict[str, Any] = {
            ID_FIELD: ids[pos],
            POS_FIELD: pos,
            VECTOR_FIELD: np.asarray(vectors[pos], dtype=np.float32),  # pymilvus packs arrays as bytes
            META_FIELD: meta,
        }
        for key, spec in fields.items():
            value = meta.get(key)
            row[spec["field"]] = float(value) if spec["type"] == "DOUBLE" and value is not None else value
        out.append(row)
    return out
