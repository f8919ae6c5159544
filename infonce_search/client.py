"""`Client` (sync) and `AsyncClient` for the infonce-search API, on httpx.

Both build the same requests and read answers the same way (infonce_search/api_requests.py): a 2xx
body as plain JSON (dicts and lists, exactly the server's documented shapes, see /docs), anything else
as the typed exception of `infonce_search.errors`. This package imports neither `app` nor `training`: it is
all a remote caller needs.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import httpx

from infonce_search.api_requests import (
    DEFAULT_TIMEOUT,
    TERMINAL_STATES,
    Request,
    Requests,
    answer,
    collection_prefix,
    document_path,
    headers,
)
from infonce_search.errors import JobFailed, JobTimeout


class Client(Requests):
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
        _prefix: str = "",
    ):
        self._owned = http is None
        self._prefix = _prefix  # "/collections/<name>" for a collection's view
        self.http = http or httpx.Client(base_url=base_url, timeout=timeout)
        self.http.headers.update(headers(api_key))

    def collection(self, name: str) -> Client:
        """The same methods for collection (or alias) `name`: each calls /collections/{name}/… on this
        client's connection (closing the view closes nothing). `client.collection("docs").search("q")`."""
        return Client(http=self.http, _prefix=collection_prefix(name))

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._owned:
            self.http.close()

    def _call(self, request: Request) -> Any:
        path = self._prefix + request.path
        return answer(
            self.http.request(request.method, path, json=request.json, params=request.params or None)
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
        return self._call(Request("GET", "/generalization-gap"))

    def ready(self) -> dict[str, Any]:
        return self._call(Request("GET", "/readyz"))

    # -- bundles ---------------------------------------------------------------------------------------------
    def bundles(self, *, gate_limit: int = 50, gate_offset: int = 0) -> dict[str, Any]:
        return self._call(
            Request("GET", "/bundles", params={"gate_limit": gate_limit, "gate_offset": gate_offset})
        )

    def activate(self, version: str) -> dict[str, Any]:
        """Roll back or forward to a published version (API key)."""
        return self._call(Request("POST", f"/bundles/{version}/activate"))

    # -- documents (without a retrain) ---------------------------------------------------------------------
    def upsert_documents(self, documents: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """POST /documents (API key): add or replace `{id, text, title?, metadata?}` documents; answers
        `applied`, `first_seq`/`seq` in the mutation log and the `live_seq` this replica serves."""
        return self._call(self._upsert(documents))

    def delete_document(self, doc_id: str) -> dict[str, Any]:
        """DELETE /documents/{id} (API key); an unknown id is not an error: it comes back in `not_found`."""
        return self._call(Request("DELETE", document_path(doc_id)))

    def delete_documents(self, ids: Sequence[str]) -> dict[str, Any]:
        """POST /documents/delete (API key): delete a batch of ids; unknown ones are listed in `not_found`."""
        return self._call(self._delete_many(ids))

    def get_document(self, doc_id: str) -> dict[str, Any]:
        """GET /documents/{id}: the document as served now; NotFound (document_not_found) if none."""
        return self._call(Request("GET", document_path(doc_id)))

    # -- jobs ------------------------------------------------------------------------------------------------
    def submit_job(
        self, type: Literal["retrain", "reindex"], dataset: str, options: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        return self._call(self._submit(type, dataset, options))

    def job(self, job_id: str) -> dict[str, Any]:
        return self._call(Request("GET", f"/jobs/{job_id}"))

    def jobs(self, *, limit: int = 100) -> dict[str, Any]:
        return self._call(Request("GET", "/jobs", params={"limit": limit}))

    def cancel_job(self, job_id: str) -> dict[str, Any]:
        return self._call(Request("POST", f"/jobs/{job_id}/cancel"))

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


class AsyncClient(Requests):
    """The same API for asyncio: `async with AsyncClient(url) as c: await c.search("...")`."""

    def __init__(
        self,
        base_url: str = "http://localhost:8000",
        *,
        api_key: str | None = None,
        timeout: float | httpx.Timeout = DEFAULT_TIMEOUT,
        http: httpx.AsyncClient | None = None,
        _prefix: str = "",
    ):
        self._owned = http is None
        self._prefix = _prefix  # "/collections/<name>" for a collection's view
        self.http = http or httpx.AsyncClient(base_url=base_url, timeout=timeout)
        self.http.headers.update(headers(api_key))

    def collection(self, name: str) -> AsyncClient:
        """As Client.collection: the same methods, awaited, for collection (or alias) `name`."""
        return AsyncClient(http=self.http, _prefix=collection_prefix(name))

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._owned:
            await self.http.aclose()

    async def _call(self, request: Request) -> Any:
        response = await self.http.request(
            request.method, self._prefix + request.path, json=request.json, params=request.params or None
        )
        return answer(response)

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
        return await self._call(Request("GET", "/generalization-gap"))

    async def ready(self) -> dict[str, Any]:
        return await self._call(Request("GET", "/readyz"))

    async def bundles(self, *, gate_limit: int = 50, gate_offset: int = 0) -> dict[str, Any]:
        return await self._call(
            Request("GET", "/bundles", params={"gate_limit": gate_limit, "gate_offset": gate_offset})
        )

    async def activate(self, version: str) -> dict[str, Any]:
        return await self._call(Request("POST", f"/bundles/{version}/activate"))

    async def upsert_documents(self, documents: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        return await self._call(self._upsert(documents))

    async def delete_document(self, doc_id: str) -> dict[str, Any]:
        return await self._call(Request("DELETE", document_path(doc_id)))

    async def delete_documents(self, ids: Sequence[str]) -> dict[str, Any]:
        return await self._call(self._delete_many(ids))

    async def get_document(self, doc_id: str) -> dict[str, Any]:
        return await self._call(Request("GET", document_path(doc_id)))

    async def submit_job(
        self, type: Literal["retrain", "reindex"], dataset: str, options: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        return await self._call(self._submit(type, dataset, options))

    async def job(self, job_id: str) -> dict[str, Any]:
        return await self._call(Request("GET", f"/jobs/{job_id}"))

    async def jobs(self, *, limit: int = 100) -> dict[str, Any]:
        return await self._call(Request("GET", "/jobs", params={"limit": limit}))

    async def cancel_job(self, job_id: str) -> dict[str, Any]:
        return await self._call(Request("POST", f"/jobs/{job_id}/cancel"))

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
