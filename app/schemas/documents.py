"""Request and response bodies of the /documents routes (upsert, delete, get)."""

from __future__ import annotations

import math
import re
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from app.schemas.search import INT64_MAX, INT64_MIN
from app.schemas.text import Text, valid_unicode

MAX_ID_CHARS = 512
MAX_METADATA_DEPTH = 32  # json_extract paths and the JSON encoder stay far from their recursion limits


def _json_value(value: Any, depth: int = 0) -> Any:
    """Metadata must round-trip through JSON and SQLite: finite numbers, 64-bit ints, valid Unicode."""
    if depth > MAX_METADATA_DEPTH:
        raise ValueError(f"nested deeper than {MAX_METADATA_DEPTH} levels")
    if isinstance(value, str):
        try:
            valid_unicode(value)
        except ValueError:
            raise ValueError("contains a string that is not valid Unicode (lone surrogate)") from None
    elif isinstance(value, bool) or value is None:
        pass
    elif isinstance(value, int):
        if not INT64_MIN <= value <= INT64_MAX:
            raise ValueError("integers must fit in 64 bits")
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError("numbers must be finite")
    elif isinstance(value, list):
        for v in value:
            _json_value(v, depth + 1)
    elif isinstance(value, dict):
        for k, v in value.items():
            _json_value(k, depth + 1)
            _json_value(v, depth + 1)
    return value


# a `.` or `..` path segment: URLs normalise them away, so GET / DELETE /documents/{id} could never name it
DOT_SEGMENT = r"(^|/)\.\.?(/|$)"


def _no_dot_segment(value: str) -> str:
    if re.search(DOT_SEGMENT, value):
        raise ValueError("must not have a '.' or '..' segment (it could not be read or deleted by URL)")
    return value


DocId = Annotated[
    Text,
    Field(
        min_length=1,
        max_length=MAX_ID_CHARS,
        description="Document id (no `.` or `..` segment between slashes).",
        json_schema_extra={"not": {"pattern": DOT_SEGMENT}},
    ),
    AfterValidator(_no_dot_segment),
]
Metadata = Annotated[dict[str, Any], AfterValidator(_json_value)]


class DocumentIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: DocId
    text: Text = Field(min_length=1, description="Body; encoded with the live model's document encoder.")
    title: Text = Field("", description="Optional title (encoded in front of the text, as in the corpus).")
    metadata: Metadata = Field(
        default_factory=dict, description="JSON object; POST /search filters and `include` see it."
    )


class UpsertRequest(BaseModel):
    """A batch of documents; an id that exists is replaced (text, title and metadata together), and an id
    given twice in the batch is written once, as its later entry says."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "documents": [
                        {
                            "id": "doc-42",
                            "title": "Vitamin D",
                            "text": "Vitamin D supplementation increased bone density in older adults.",
                            "metadata": {"year": 2024, "source": "pubmed"},
                        }
                    ]
                }
            ]
        },
    )

    documents: list[DocumentIn] = Field(min_length=1, description="At most SEARCH_MAX_DOCUMENTS_BATCH.")


class DeleteRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"ids": ["doc-42", "doc-7"]}]})

    ids: list[DocId] = Field(min_length=1, description="At most SEARCH_MAX_DOCUMENTS_BATCH ids.")


class MutationResponse(BaseModel):
    applied: int = Field(
        description="Documents written (upserts) or deleted (deletes: ids in `not_found` are not counted). "
        "The batch's log rows, first_seq..seq, one per document or id, are written in one transaction."
    )
    first_seq: int = Field(description="Sequence number of the first row of this batch.")
    seq: int = Field(
        description="Sequence number of the last row: every replica serves the write once it "
        "has applied this seq (GET /bundles shows each replica's applied_seq)."
    )
    version: str = Field(description="Bundle version the write was applied to on this replica.")
    live_seq: int = Field(
        description="Seq this replica has applied when answering (>= seq: read-your-writes)."
    )
    not_found: list[str] | None = Field(
        None,
        description="Deletes only: ids that did not exist here. Deleting an unknown id is not an error "
        "(deletes are idempotent, so a retried delete answers 200 too); it is logged all the same.",
    )


class DocumentOut(BaseModel):
    id: str
    title: str
    text: str
    metadata: dict[str, Any]
    seq: int | None = Field(description="Seq of the write that made this version; null: as in the bundle.")
    version: str = Field(description="Bundle version that answered.")
