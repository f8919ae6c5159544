"""Python client of the infonce-search API (httpx; sync and async).

    from infonce_search import Client

    with Client("http://localhost:8000", api_key="...") as client:
        hits = client.search("vitamin D and bone density", top_k=5)["results"][0]["hits"]
        vectors = client.embed(["a query"])["embeddings"]
        job = client.wait_for_job(client.submit_job("reindex", "scifact")["id"])
        client.upsert_documents([{"id": "doc-42", "text": "Supplements raised bone density."}])

Errors are raised as `infonce_search.errors` classes carrying the server's `error.code`.
"""

from importlib import metadata as _metadata

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
)

try:
    __version__ = _metadata.version("infonce-search")
except _metadata.PackageNotFoundError:  # a source checkout that was never installed
    __version__ = "0+unknown"

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
    "__version__",
]
