"""Python client of the infonce-search API (httpx; sync and async).

    from infonce_search import Client

    with Client("http://localhost:8000", api_key="...") as client:
        hits = client.search("vitamin D and bone density", top_k=5, mode="hybrid").hits
        vectors = client.embed(["a query"]).embeddings
        job = client.wait_for_job(client.submit_job("reindex", "scifact").id)
        client.upsert_documents([{"id": "doc-42", "text": "Supplements raised bone density."}])

Answers are pydantic models (infonce_search.models); errors are `infonce_search.errors` classes carrying
the server's `error.code`; 429 / 503 and refused connections are retried (RetryPolicy), and a server that
stays unreachable raises ServerUnreachable. Needs only httpx, pydantic and tenacity.
"""

from importlib import metadata as _metadata

from infonce_search import models
from infonce_search.client import AsyncClient, Client
from infonce_search.errors import (
    ApiError,
    InfonceSearchError,
    InvalidRequest,
    JobFailed,
    JobTimeout,
    NoLiveBundle,
    NotFound,
    QueueFull,
    ServerUnreachable,
    ServiceUnavailable,
)
from infonce_search.retries import RetryPolicy


def _installed_version() -> str:
    # the server's distribution carries this package, and so does the client's alone (clients/python)
    for distribution in ("infonce-search", "infonce-search-client"):
        try:
            return _metadata.version(distribution)
        except _metadata.PackageNotFoundError:
            continue
    return "0+unknown"  # a source checkout that was never installed


__version__ = _installed_version()

__all__ = [
    "ApiError",
    "AsyncClient",
    "Client",
    "InfonceSearchError",
    "InvalidRequest",
    "JobFailed",
    "JobTimeout",
    "NoLiveBundle",
    "NotFound",
    "QueueFull",
    "RetryPolicy",
    "ServerUnreachable",
    "ServiceUnavailable",
    "__version__",
    "models",
]
