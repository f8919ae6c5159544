"""`Client` (sync) and `AsyncClient` for the infonce-search API, on httpx.

Both build the same requests (`_Requests`) and read answers the same way (`_answer`): a 2xx body as
plain JSON (dicts and lists, exactly the server's documented shapes, see /docs), anything else as the
typed exception of `infonce_search.errors`. This package imports neither `app` nor `training`: it is
all a remote caller needs.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import quote

import httpx

from infonce_search.errors import JobFailed, JobTimeout, error_for

TERMINAL_STATES = ("succeeded", "failed", "cancelled")
DEFAULT_TIMEOUT = httpx.Timeout(30.0, connect=5.0)


@dataclass
class _Request:
    method: str
    path: str
    json: Any = None
    params: dict[str, Any] = field(default_factory=dict)


def _answer(response: httpx.Response) -> Any:
    if response.is_success:
        return response.json() if response.content else None
    try:
        body: Any = response.json()
    except ValueError:
        body = response.text
    raise error_for(response.status_code, body)


def _headers(api_key: str | None) -> dict[str, str]:
    return {"X-API-Key": api_key} if api_key else {}


def _document_path(doc_id: str) -> str:
    """/documents/{id} with the id as one escaped segment: ids may hold "/", "?", "#" or spaces, and
    httpx would resolve an id of "." or ".." as a dot segment (the server unescapes all of it)."""
    segment = quote(doc_id, safe="")
    return "/documents/" + (segment.replace(".", "%2E") if segment in (".", "..") else segment)


class _Requests:
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
    ) -> _Request:
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
        return _Request("POST", "/search", body)

    @staticmethod
    def _embed(texts: str | Sequence[str], kind: str) -> _Request:
        return _Request(
            "POST", "/embed", {"input": texts if isinstance(texts, str) else list(texts), "kind": kind}
        )

    @staticmethod
    def _submit(type: str, dataset: str, options: dict[str, Any] | None) -> _Request:
        return _Request("POST", "/jobs", {"type": type, "dataset": dataset, "options": options or {}})

    @staticmethod
    def _upsert(documents: Sequence[Mapping[str, Any]]) -> _Request:
        return _Request("POST", "/documents", {"documents": [dict(d) for d in documents]})

    @staticmethod
    def _delete_many(ids: Sequence[str]) -> _Request:
        if isinstance(ids, str):  # a lone id would be sent as its characters
            raise TypeError("ids: give a list of ids (delete_document deletes one)")
        return _Request("POST", "/documents/delete", {"ids": list(ids)})


class Client(_Requests):
    """Blocking client. `with Client("http://localhost:8000", api_key=...) as c: c.search("...")`.

    `http`: an httpx.Client of your own (proxies, TLS, a test transport); its base URL is used as given.
    """

    def __init__(
        self,
        base_url: str = "http://localhost:8000",
        *,
        api_key: str | None = None,
        timeout: float | httpx.Timeout = DEFAULT_TIMEOUT,
        http: httpx.Client | None = None,
    ):
        self._owned = http is None
        self.http = http or httpx.Client(base_url=base_url, timeout=timeout)
        self.http.headers.update(_headers(api_key))

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._owned:
            self.http.close()

    def _call(self, request: _Request) -> Any:
        return _answer(
            self.http.request(request.method, request.path, json=request.json, params=request.params or None)
        )

    # -- search and vectors -------------------------------------------------------------------------------
    def search(
        self,
        query: str | Sequence[str] | None = None,
        *,
        vector: Sequence[float] | Sequence[Sequence[float]] | None = None,
        top_k: int = 10,
        filter: dict[str, Any] | None = None,
        min_score: float | None = None,
        include: Sequence[str] = (),
    ) -> dict[str, Any]:
        """POST /search: one text or several (`query`), or one vector or several (`vector`)."""
        return self._call(
            self._search(
                query, vector=vector, top_k=top_k, filter=filter, min_score=min_score, include=include
            )
        )

    def embed(
        self, texts: str | Sequence[str], *, kind: Literal["query", "document"] = "query"
    ) -> dict[str, Any]:
        """POST /embed: vectors in the live index's space (`embeddings`), with the bundle `version`."""
        return self._call(self._embed(texts, kind))

    def generalization_gap(self) -> dict[str, Any]:
        return self._call(_Request("GET", "/generalization-gap"))

    def ready(self) -> dict[str, Any]:
        return self._call(_Request("GET", "/readyz"))

    # -- bundles ---------------------------------------------------------------------------------------------
    def bundles(self, *, gate_limit: int = 50, gate_offset: int = 0) -> dict[str, Any]:
        return self._call(
            _Request("GET", "/bundles", params={"gate_limit": gate_limit, "gate_offset": gate_offset})
        )

    def activate(self, version: str) -> dict[str, Any]:
        """Roll back or forward to a published version (API key)."""
        return self._call(_Request("POST", f"/bundles/{version}/activate"))

    # -- documents (without a retrain) ---------------------------------------------------------------------
    def upsert_documents(self, documents: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """POST /documents (API key): add or replace `{id, text, title?, metadata?}` documents; answers
        `applied`, `first_seq`/`seq` in the mutation log and the `live_seq` this replica serves."""
        return self._call(self._upsert(documents))

    def delete_document(self, doc_id: str) -> dict[str, Any]:
        """DELETE /documents/{id} (API key); an unknown id is not an error: it comes back in `not_found`."""
        return self._call(_Request("DELETE", _document_path(doc_id)))

    def delete_documents(self, ids: Sequence[str]) -> dict[str, Any]:
        """POST /documents/delete (API key): delete a batch of ids; unknown ones are listed in `not_found`."""
        return self._call(self._delete_many(ids))

    def get_document(self, doc_id: str) -> dict[str, Any]:
        """GET /documents/{id}: the document as served now; NotFound (document_not_found) if none."""
        return self._call(_Request("GET", _document_path(doc_id)))

    # -- jobs ------------------------------------------------------------------------------------------------
    def submit_job(
        self, type: Literal["retrain", "reindex"], dataset: str, options: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        return self._call(self._submit(type, dataset, options))

    def job(self, job_id: str) -> dict[str, Any]:
        return self._call(_Request("GET", f"/jobs/{job_id}"))

    def jobs(self, *, limit: int = 100) -> dict[str, Any]:
        return self._call(_Request("GET", "/jobs", params={"limit": limit}))

    def cancel_job(self, job_id: str) -> dict[str, Any]:
        return self._call(_Request("POST", f"/jobs/{job_id}/cancel"))

    def wait_for_job(
        self, job_id: str, *, timeout: float = 3600.0, poll_interval: float = 2.0
    ) -> dict[str, Any]:
        """Poll until the job ends: its record when it succeeded; JobFailed (failed or cancelled) or
        JobTimeout (still queued or running after `timeout` seconds) otherwise."""
        deadline = time.monotonic() + timeout
        while True:
            job = self.job(job_id)
            if job["state"] in TERMINAL_STATES:
                if job["state"] != "succeeded":
                    raise JobFailed(job)
                return job
            if time.monotonic() >= deadline:
                raise JobTimeout(job, timeout)
            time.sleep(min(poll_interval, max(0.0, deadline - time.monotonic())))


class AsyncClient(_Requests):
    """The same API for asyncio: `async with AsyncClient(url) as c: await c.search("...")`."""

    def __init__(
        self,
        base_url: str = "http://localhost:8000",
        *,
        api_key: str | None = None,
        timeout: float | httpx.Timeout = DEFAULT_TIMEOUT,
        http: httpx.AsyncClient | None = None,
    ):
        self._owned = http is None
        self.http = http or httpx.AsyncClient(base_url=base_url, timeout=timeout)
        self.http.headers.update(_headers(api_key))

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._owned:
            await self.http.aclose()

    async def _call(self, request: _Request) -> Any:
        response = await self.http.request(
            request.method, request.path, json=request.json, params=request.params or None
        )
        return _answer(response)

    async def search(
        self,
        query: str | Sequence[str] | None = None,
        *,
        vector: Sequence[float] | Sequence[Sequence[float]] | None = None,
        top_k: int = 10,
        filter: dict[str, Any] | None = None,
        min_score: float | None = None,
        include: Sequence[str] = (),
    ) -> dict[str, Any]:
        return await self._call(
            self._search(
                query, vector=vector, top_k=top_k, filter=filter, min_score=min_score, include=include
            )
        )

    async def embed(
        self, texts: str | Sequence[str], *, kind: Literal["query", "document"] = "query"
    ) -> dict[str, Any]:
        return await self._call(self._embed(texts, kind))

    async def generalization_gap(self) -> dict[str, Any]:
        return await self._call(_Request("GET", "/generalization-gap"))

    async def ready(self) -> dict[str, Any]:
        return await self._call(_Request("GET", "/readyz"))

    async def bundles(self, *, gate_limit: int = 50, gate_offset: int = 0) -> dict[str, Any]:
        return await self._call(
            _Request("GET", "/bundles", params={"gate_limit": gate_limit, "gate_offset": gate_offset})
        )

    async def activate(self, version: str) -> dict[str, Any]:
        return await self._call(_Request("POST", f"/bundles/{version}/activate"))

    async def upsert_documents(self, documents: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        return await self._call(self._upsert(documents))

    async def delete_document(self, doc_id: str) -> dict[str, Any]:
        return await self._call(_Request("DELETE", _document_path(doc_id)))

    async def delete_documents(self, ids: Sequence[str]) -> dict[str, Any]:
        return await self._call(self._delete_many(ids))

    async def get_document(self, doc_id: str) -> dict[str, Any]:
        return await self._call(_Request("GET", _document_path(doc_id)))

    async def submit_job(
        self, type: Literal["retrain", "reindex"], dataset: str, options: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        return await self._call(self._submit(type, dataset, options))

    async def job(self, job_id: str) -> dict[str, Any]:
        return await self._call(_Request("GET", f"/jobs/{job_id}"))

    async def jobs(self, *, limit: int = 100) -> dict[str, Any]:
        return await self._call(_Request("GET", "/jobs", params={"limit": limit}))

    async def cancel_job(self, job_id: str) -> dict[str, Any]:
        return await self._call(_Request("POST", f"/jobs/{job_id}/cancel"))

    async def wait_for_job(
        self, job_id: str, *, timeout: float = 3600.0, poll_interval: float = 2.0
    ) -> dict[str, Any]:
        """As Client.wait_for_job, without blocking the event loop."""
        deadline = time.monotonic() + timeout
        while True:
            job = await self.job(job_id)
            if job["state"] in TERMINAL_STATES:
                if job["state"] != "succeeded":
                    raise JobFailed(job)
                return job
            if time.monotonic() >= deadline:
                raise JobTimeout(job, timeout)
            await asyncio.sleep(min(poll_interval, max(0.0, deadline - time.monotonic())))
