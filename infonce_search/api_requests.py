"""The API's routes as requests, and its answers read back: what `Client` and `AsyncClient` share
(no I/O here). A 2xx body is read into the route's model (infonce_search/models.py); anything else
becomes the typed exception of `infonce_search.errors`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar
from urllib.parse import quote

import httpx
from pydantic import TypeAdapter

from infonce_search import models
from infonce_search.errors import error_for

TERMINAL_STATES = ("succeeded", "failed", "cancelled")
DEFAULT_TIMEOUT = httpx.Timeout(30.0, connect=5.0)
T = TypeVar("T")
# GET /jobs/{id}: the detail with the API key, the summary without (pydantic's smart union: the richer fit)
JOB_VIEW: Callable[[Any], models.JobDetail | models.JobSummary] = TypeAdapter(
    models.JobDetail | models.JobSummary
).validate_python


@dataclass
class Request(Generic[T]):
    method: str
    path: str
    returns: Callable[[Any], T]  # reads the 2xx JSON body into the route's model
    json: Any = None
    params: dict[str, Any] = field(default_factory=dict)


def answer(response: httpx.Response, returns: Callable[[Any], T]) -> T:
    if response.is_success:
        return returns(response.json())
    try:
        body: Any = response.json()
    except ValueError:
        body = response.text
    raise error_for(response.status_code, body, response.headers.get("retry-after"))


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


def _token_or_text(x: Any) -> Any:
    """One item of /v1/embeddings' input as JSON: a text, a token id, or a token array (numpy ones too)."""
    if isinstance(x, str):
        return x
    if hasattr(x, "__len__"):
        return [int(t) for t in x]
    return int(x)


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
        mode: models.Mode | None,
        offset: int | None,
    ) -> Request[models.SearchResponse]:
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
        if mode is not None:
            body["mode"] = mode
        if offset is not None:  # sent only when asked for: a server without pagination refuses the field
            body["offset"] = offset
        return Request("POST", "/search", models.SearchResponse.model_validate, body)

    @staticmethod
    def _embed(texts: str | Sequence[str], kind: str) -> Request[models.EmbedResponse]:
        body = {"input": texts if isinstance(texts, str) else list(texts), "kind": kind}
        return Request("POST", "/embed", models.EmbedResponse.model_validate, body)

    @staticmethod
    def _embeddings(
        input: str | Sequence[str] | Sequence[int] | Sequence[Sequence[int]],
        model: str | None,
        encoding_format: Literal["float", "base64"],
        dimensions: int | None,
        input_type: Literal["query", "document"],
    ) -> Request[models.OpenAIEmbeddingResponse]:
        items: Any = input if isinstance(input, str) else [_token_or_text(x) for x in input]
        body: dict[str, Any] = {
            "input": items,
            "encoding_format": encoding_format,
            "input_type": input_type,
        }
        if model is not None:
            body["model"] = model
        if dimensions is not None:
            body["dimensions"] = dimensions
        return Request("POST", "/v1/embeddings", models.OpenAIEmbeddingResponse.model_validate, body)

    @staticmethod
    def _submit(type: str, dataset: str, options: dict[str, Any] | None) -> Request[models.JobDetail]:
        body = {"type": type, "dataset": dataset, "options": options or {}}
        return Request("POST", "/jobs", models.JobDetail.model_validate, body)

    @staticmethod
    def _feedback(judgments: Sequence[Mapping[str, Any]]) -> Request[models.FeedbackResponse]:
        body = {"judgments": [dict(j) for j in judgments]}
        return Request("POST", "/feedback", models.FeedbackResponse.model_validate, body)

    @staticmethod
    def _upsert(documents: Sequence[Mapping[str, Any]]) -> Request[models.MutationResponse]:
        body = {"documents": [dict(d) for d in documents]}
        return Request("POST", "/documents", models.MutationResponse.model_validate, body)

    @staticmethod
    def _delete_many(ids: Sequence[str]) -> Request[models.MutationResponse]:
        if isinstance(ids, str):  # a lone id would be sent as its characters
            raise TypeError("ids: give a list of ids (delete_document deletes one)")
        return Request(
            "POST", "/documents/delete", models.MutationResponse.model_validate, {"ids": list(ids)}
        )

    # -- requests without a body ----------------------------------------------------------------------------
    @staticmethod
    def _bundles(gate_limit: int, gate_offset: int) -> Request[models.BundlesResponse]:
        params = {"gate_limit": gate_limit, "gate_offset": gate_offset}
        return Request("GET", "/bundles", models.BundlesResponse.model_validate, params=params)

    @staticmethod
    def _activate(version: str) -> Request[models.ActivateResponse]:
        return Request(
            "POST", f"/bundles/{quote(version, safe='')}/activate", models.ActivateResponse.model_validate
        )

    @staticmethod
    def _delete_one(doc_id: str) -> Request[models.MutationResponse]:
        return Request("DELETE", document_path(doc_id), models.MutationResponse.model_validate)

    @staticmethod
    def _get_document(doc_id: str) -> Request[models.DocumentOut]:
        return Request("GET", document_path(doc_id), models.DocumentOut.model_validate)

    @staticmethod
    def _job(job_id: str) -> Request[models.JobDetail | models.JobSummary]:
        return Request("GET", f"/jobs/{quote(job_id, safe='')}", JOB_VIEW)

    @staticmethod
    def _jobs(limit: int) -> Request[models.JobList]:
        return Request("GET", "/jobs", models.JobList.model_validate, params={"limit": limit})

    @staticmethod
    def _cancel(job_id: str) -> Request[models.JobDetail]:
        return Request("POST", f"/jobs/{quote(job_id, safe='')}/cancel", models.JobDetail.model_validate)
