"""The API's routes as requests, and its answers read back: what `Client` and `AsyncClient` share
(no I/O here). A 2xx body is plain JSON (dicts and lists, exactly the server's documented shapes, see
/docs); anything else becomes the typed exception of `infonce_search.errors`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import httpx

from infonce_search.errors import error_for

TERMINAL_STATES = ("succeeded", "failed", "cancelled")
DEFAULT_TIMEOUT = httpx.Timeout(30.0, connect=5.0)


@dataclass
class Request:
    method: str
    path: str
    json: Any = None
    params: dict[str, Any] = field(default_factory=dict)


def answer(response: httpx.Response) -> Any:
    if response.is_success:
        return response.json() if response.content else None
    try:
        body: Any = response.json()
    except ValueError:
        body = response.text
    raise error_for(response.status_code, body)


def headers(api_key: str | None) -> dict[str, str]:
    return {"X-API-Key": api_key} if api_key else {}


def document_path(doc_id: str) -> str:
    """/documents/{id} with the id as one escaped segment: ids may hold "/", "?", "#" or spaces, and
    httpx would resolve an id of "." or ".." as a dot segment (the server unescapes all of it)."""
    segment = quote(doc_id, safe="")
    return "/documents/" + (segment.replace(".", "%2E") if segment in (".", "..") else segment)


def collection_prefix(name: str) -> str:
    """/collections/{name} with the name as one escaped segment (the server refuses anything that is not a
    collection name with 400, rather than this client resolving '..' or '/' into another route)."""
    segment = quote(name, safe="")
    return "/collections/" + (segment.replace(".", "%2E") if segment in (".", "..") else segment)


class Requests:
    """The API's routes as requests (no I/O here)."""

    @staticmethod
    def _search(
        query: str | Sequence[str] | None,
        *,
        vector: Sequence[float] | Sequence[Sequence[float]] | None,
        top_k: int,
        filter: dict[str, Any] | None,
        min_score: float | None,
        include: Sequence[str],
    ) -> Request:
        if (query is None) == (vector is None):
            raise ValueError("give exactly one of query (a text or texts) and vector (one or several)")
        body: dict[str, Any] = {"top_k": top_k}
        if isinstance(query, str):
            body["query"] = query
        elif query is not None:
            body["queries"] = list(query)
        elif vector is not None and len(vector) and hasattr(vector[0], "__len__"):  # rows (lists, numpy)
            body["vectors"] = [[float(x) for x in row] for row in vector]  # type: ignore[union-attr]
        elif vector is not None:
            body["vector"] = [float(x) for x in vector]  # type: ignore[arg-type]
        if filter:
            body["filter"] = filter
        if min_score is not None:
            body["min_score"] = min_score
        if include:
            body["include"] = list(include)
        return Request("POST", "/search", body)

    @staticmethod
    def _embed(texts: str | Sequence[str], kind: str) -> Request:
        return Request(
            "POST", "/embed", {"input": texts if isinstance(texts, str) else list(texts), "kind": kind}
        )

    @staticmethod
    def _submit(type: str, dataset: str, options: dict[str, Any] | None) -> Request:
        return Request("POST", "/jobs", {"type": type, "dataset": dataset, "options": options or {}})

    @staticmethod
    def _upsert(documents: Sequence[Mapping[str, Any]]) -> Request:
        return Request("POST", "/documents", {"documents": [dict(d) for d in documents]})

    @staticmethod
    def _delete_many(ids: Sequence[str]) -> Request:
        if isinstance(ids, str):  # a lone id would be sent as its characters
            raise TypeError("ids: give a list of ids (delete_document deletes one)")
        return Request("POST", "/documents/delete", {"ids": list(ids)})
