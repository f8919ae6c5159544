"""The index-backend seam: where a bundle's vectors are searched (FAISS in process, or Milvus).

A bundle's manifest says where its index lives (`IndexInfo.kind == "milvus"`: a Milvus collection,
else an `index.faiss` file in the folder). Everything above the index (routes, micro-batcher, gate,
report) talks to a `SearchIndex` and does not know which backend answers:

- `search(queries, k, allowed=None)`: per query (positions int64, scores float32), best first, in the
  model's similarity (cosine for InfoNCE, −½‖√Λ⊙(u−v)‖² for AnInfoNCE);
- `search_filter(queries, k, filter)`: the same under a metadata filter, on an index that evaluates
  filters itself (Milvus translates it to a boolean expression); FAISS is searched through the allowed
  positions the docstore gave for the filter (`search_with_filter`);
- `readiness_problems()`: what stops the index from serving now (empty = ready);
- `ntotal`, `dim`, `info`.

`IndexPointer` is the other half of the seam: BundleStore tells it when CURRENT moves (Milvus flips
its alias) and when a version is pruned (Milvus drops its collection). `BackendConfig` is the
configuration both the API (Settings) and training (CLI / job options) pass down.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

import numpy as np

from contract.errors import ConfigError

if TYPE_CHECKING:
    from contract.index.vector_index import IndexInfo, Rankings

IndexBackend = Literal["faiss", "milvus"]
# the FAISS index kinds (training.export.index_factory builds them); defined here, not beside FAISS, so the CLI
# and the job options can name them without importing faiss
IndexKind = Literal["auto", "flat", "hnsw", "ivf", "ivfpq"]
BACKENDS = ("faiss", "milvus")
MILVUS_KIND = "milvus"  # IndexInfo.kind of a bundle whose vectors live in a Milvus collection
MILVUS_EXTRAS = "milvus"  # manifest.extras key: collection, alias, index type, search params, fields


@dataclass(frozen=True)
class BackendConfig:
    """Which backend builds and serves indexes, and how to reach Milvus when it is Milvus."""

    backend: IndexBackend = "faiss"
    milvus_uri: str | None = None  # a milvus-lite data path (one machine, tests) or http://host:19530
    milvus_token: str | None = None  # "user:password" or an API key; None = no authentication
    milvus_name: str = "infonce"  # collections are <name>_v<version>, the live alias <name>_live
    timeout_s: float = 10.0

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ConfigError(f"index backend {self.backend!r}: expected one of {', '.join(BACKENDS)}")
        if self.backend == "milvus" and not self.milvus_uri:
            raise ConfigError(
                "index backend milvus needs a Milvus URI (SEARCH_MILVUS_URI / --milvus-uri): "
                "a milvus-lite data path or http://host:19530"
            )


@runtime_checkable
class SearchIndex(Protocol):
    info: IndexInfo

    @property
    def ntotal(self) -> int: ...

    @property
    def dim(self) -> int: ...

    def search(self, queries: np.ndarray, k: int, *, allowed: np.ndarray | None = None) -> Rankings: ...


@runtime_checkable
class FilteringIndex(Protocol):
    """An index that evaluates metadata filters itself (Milvus), instead of through the docstore."""

    def search_filter(self, queries: np.ndarray, k: int, filter: Mapping[str, Any]) -> Rankings: ...


@runtime_checkable
class CheckedIndex(Protocol):
    def readiness_problems(self) -> list[str]: ...


class IndexPointer(Protocol):
    """BundleStore's hook into a backend whose index lives outside the bundle folder: opens it (to
    validate and load), is told when CURRENT moves and when a version is deleted (keep-N)."""

    def open_index(self, manifest: Any) -> Any: ...

    def on_current(self, manifest: Any) -> None: ...

    def on_delete(self, manifest: Any) -> None: ...


# manifest -> SearchIndex, for indexes outside the folder. Manifests are typed Any in this module:
# contract.bundles.bundle imports it, so naming contract.bundles.bundle here would make an import circle
IndexOpener = Callable[[Any], Any]


def search_with_filter(
    index: Any,
    queries: np.ndarray,
    k: int,
    filter: Mapping[str, Any],
    allowed: Callable[[], np.ndarray | None],
) -> Rankings:
    """Filtered search on either backend: Milvus filters server-side; any other index searches the
    positions `allowed()` gives, the filter as the caller evaluated it once for the whole request
    (contract.mutations.overlay.Scope), so it is not evaluated again here."""
    if isinstance(index, FilteringIndex):
        return index.search_filter(queries, k, filter)
    rows: Rankings = index.search(queries, k, allowed=allowed())
    return rows


def readiness_problems(index: Any) -> list[str]:
    """What keeps `index` from serving (an in-process FAISS index has nothing to check)."""
    return index.readiness_problems() if isinstance(index, CheckedIndex) else []


def is_milvus(info: IndexInfo) -> bool:
    return info.kind == MILVUS_KIND
