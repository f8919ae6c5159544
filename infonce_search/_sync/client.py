# Generated from infonce_search/_async/client.py by scripts/unasync_client.py: do not edit.
"""`AsyncClient`, the source of both clients: `Client` (infonce_search/_sync/client.py) is generated from
this file by unasync (`python scripts/unasync_client.py`; tests/app/client/test_client_generated.py
checks the two agree), so each method is written once.

Both build the same requests and read answers the same way (infonce_search/api_requests.py): a 2xx
body into the route's pydantic model (infonce_search/models.py), anything else as the typed exception of
`infonce_search.errors`; 429 / 503 answers and refused connections are retried with backoff
(infonce_search/retries.py), and a server that stays unreachable raises `ServerUnreachable`. This package
imports neither `app` nor `training` (nor torch, faiss, numpy): it is all a remote caller needs.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from time import sleep
from typing import Any, Literal, TypeVar

import httpx

from infonce_search import models as schema  # `models` is also a method (GET /v1/models)
from infonce_search.api_requests import (
    DEFAULT_TIMEOUT,
    TERMINAL_STATES,
    Request,
    Requests,
    answer,
    collection_prefix,
    headers,
)
from infonce_search.errors import JobFailed, JobTimeout, ServerUnreachable
from infonce_search.retries import RetryPolicy

T = TypeVar("T")
Vector = Sequence[float] | Sequence[Sequence[float]]
TokenInput = str | Sequence[str] | Sequence[int] | Sequence[Sequence[int]]
UNREACHABLE = (httpx.ConnectError, httpx.ConnectTimeout)


class Client(Requests):
    """Client of the API: `with Client("http://localhost:8000", api_key=...) as c: c.search("...")`, or
    without blocking, `async with AsyncClient(...) as c: await c.search("...")` (the same methods, awaited).

    `http`: an httpx.Client of your own (proxies, TLS, a test transport); its base URL is used as given.
    `retry`: how 429 / 503 answers and refused connections are retried (`RetryPolicy(attempts=1)`: never).
    """

    def __init__(
        self,
        base_url: str = "http://localhost:8000",
        *,
        api_key: str | None = None,
        timeout: float | httpx.Timeout = DEFAULT_TIMEOUT,
        http: httpx.Client | None = None,
        retry: RetryPolicy = RetryPolicy(),  # noqa: B008 - frozen dataclass, shared safely
        _prefix: str = "",
    ):
        self._owned = http is None
        self._prefix = _prefix  # "/collections/<name>" for a collection's view
        self.retry = retry
        self.http = http or httpx.Client(base_url=base_url, timeout=timeout)
        self.http.headers.update(headers(api_key))

    def collection(self, name: str) -> Client:
        """The same methods for collection (or alias) `name`: each calls /collections/{name}/… on this
        client's connection (closing the view closes nothing). `client.collection("docs").search("q")`."""
        return Client(http=self.http, retry=self.retry, _prefix=collection_prefix(name))

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._owned:
            self.http.close()

    def _call(self, request: Request[T]) -> T:
        path = self._prefix + request.path
        for attempt in self.retry.retrying():
            with attempt:
                try:
                    response = self.http.request(
                        request.method, path, json=request.json, params=request.params or None
                    )
                except UNREACHABLE as exc:
                    raise ServerUnreachable(str(self.http.base_url), exc) from exc
                return answer(response, request.returns)
        raise AssertionError("unreachable: tenacity re-raises the last error")

    # -- search and vectors -------------------------------------------------------------------------------
    def search(
        self,
        query: str | Sequence[str] | None = None,
        *,
        vector: Vector | None = None,
        top_k: int = 10,
        filter: dict[str, Any] | None = None,
        min_score: float | None = None,
        include: Sequence[str] = (),
        mode: schema.Mode | None = None,
        offset: int | None = None,
    ) -> schema.SearchResponse:
        """POST /search: one text or several (`query`), or one vector or several (`vector`). `mode`:
        dense, lexical or hybrid (unset: the live bundle's default; the answer's `mode` says which ran).
        `offset`: skip that many hits (pagination), sent only when given."""
        return self._call(
            self._search(
                query, vector=vector, top_k=top_k, filter=filter, min_score=min_score, include=include,
                mode=mode, offset=offset,
            )
        )  # fmt: skip

    def embed(
        self, texts: str | Sequence[str], *, kind: Literal["query", "document"] = "query"
    ) -> schema.EmbedResponse:
        """POST /embed: vectors in the live index's space (`embeddings`), with the bundle `version`."""
        return self._call(self._embed(texts, kind))

    def embeddings(
        self,
        input: TokenInput,
        *,
        model: str | None = None,
        encoding_format: Literal["float", "base64"] = "float",
        dimensions: int | None = None,
        input_type: Literal["query", "document"] = "query",
    ) -> schema.OpenAIEmbeddingResponse:
        """POST /v1/embeddings (OpenAI's shape): texts or token-id arrays; `model` must name the served
        model (see `models()`) or be left out."""
        return self._call(self._embeddings(input, model, encoding_format, dimensions, input_type))

    def models(self) -> schema.OpenAIModelList:
        """GET /v1/models: the served model's names."""
        return self._call(Request("GET", "/v1/models", schema.OpenAIModelList.model_validate))

    def generalization_gap(self) -> schema.GapResponse:
        return self._call(Request("GET", "/generalization-gap", schema.GapResponse.model_validate))

    def ready(self) -> schema.ReadyWithCollections:
        return self._call(Request("GET", "/readyz", schema.ReadyWithCollections.model_validate))

    # -- bundles ---------------------------------------------------------------------------------------------
    def bundles(self, *, gate_limit: int = 50, gate_offset: int = 0) -> schema.BundlesResponse:
        return self._call(self._bundles(gate_limit, gate_offset))

    def activate(self, version: str) -> schema.ActivateResponse:
        """Roll back or forward to a published version (API key)."""
        return self._call(self._activate(version))

    # -- feedback ------------------------------------------------------------------------------------------
    def feedback(self, judgments: Sequence[Mapping[str, Any]]) -> schema.FeedbackResponse:
        """POST /feedback (SEARCH_API_KEY or SEARCH_FEEDBACK_KEY): relevance judgments
        `{query, document_id, relevant (bool or 0-3), search_id?}`, stored all or none. Pass the `search_id`
        of the result the user judged (`search(...).results[i].search_id`) so the judgment records what was
        shown; the judgments of the live version feed `generalization_gap().live`."""
        return self._call(self._feedback(judgments))

    # -- documents (without a retrain) ---------------------------------------------------------------------
    def upsert_documents(self, documents: Sequence[Mapping[str, Any]]) -> schema.MutationResponse:
        """POST /documents (API key): add or replace `{id, text, title?, metadata?}` documents; answers
        `applied`, `first_seq`/`seq` in the mutation log and the `live_seq` this replica serves."""
        return self._call(self._upsert(documents))

    def delete_document(self, doc_id: str) -> schema.MutationResponse:
        """DELETE /documents/{id} (API key); an unknown id is not an error: it comes back in `not_found`
        (and `applied` is 0)."""
        return self._call(self._delete_one(doc_id))

    def delete_documents(self, ids: Sequence[str]) -> schema.MutationResponse:
        """POST /documents/delete (API key): delete a batch of ids; unknown ones are listed in `not_found`."""
        return self._call(self._delete_many(ids))

    def get_document(self, doc_id: str) -> schema.DocumentOut:
        """GET /documents/{id}: the document as served now; NotFound (document_not_found) if none."""
        return self._call(self._get_document(doc_id))

    # -- jobs ------------------------------------------------------------------------------------------------
    def submit_job(
        self, type: Literal["retrain", "reindex"], dataset: str, options: dict[str, Any] | None = None
    ) -> schema.JobDetail:
        return self._call(self._submit(type, dataset, options))

    def job(self, job_id: str) -> schema.JobDetail | schema.JobSummary:
        """A job's record: the detail with the API key, the summary without."""
        return self._call(self._job(job_id))

    def jobs(self, *, limit: int = 100) -> schema.JobList:
        return self._call(self._jobs(limit))

    def cancel_job(self, job_id: str) -> schema.JobDetail:
        return self._call(self._cancel(job_id))

    def wait_for_job(
        self, job_id: str, *, timeout: float = 3600.0, poll_interval: float = 2.0
    ) -> schema.JobDetail | schema.JobSummary:
        """Poll until the job ends: its record when it succeeded; JobFailed (failed or cancelled) or
        JobTimeout (still queued or running after `timeout` seconds) otherwise."""
        deadline = time.monotonic() + timeout
        while True:
            job = self.job(job_id)
            if job.state in TERMINAL_STATES:
                if job.state != "succeeded":
                    raise JobFailed(job)
                return job
            if time.monotonic() >= deadline:
                raise JobTimeout(job, timeout)
            sleep(min(poll_interval, max(0.0, deadline - time.monotonic())))
