"""Searching a bundle's Milvus collection: connection, filter expressions, the live alias.

One collection per bundle version (`<name>_v<version>`): primary key = document id, `pos` = the row's
position in the bundle (ids.json / docs.sqlite order, so hits resolve to documents exactly as with
FAISS), `vector` = the index-space vector, one typed scalar field per metadata key that has one scalar
type across the corpus (`m_<key>`), and `metadata` = the whole metadata object as JSON. The alias
`<name>_live` is the cluster-side CURRENT pointer: BundleStore flips it after writing CURRENT.

Why searches name the version's collection, not the alias: another process may flip the alias before
this replica has followed CURRENT; a request must use one version end to end (its positions index this
version's docstore). Readiness checks that the alias names this version's collection and answers.

Scores are the model's similarity, as with FAISS: Milvus IP is the inner product (cosine on the unit
rows of InfoNCE); Milvus L2 returns the squared distance, so the score is −½·distance (AnInfoNCE's
−½‖√Λ⊙(u−v)‖² on √Λ-scaled vectors).

Filters become Milvus boolean expressions in contract/milvus/expressions.py.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from contract.encoding.similarity import index_scores
from contract.errors import BundleInvalid, ConfigError, IndexUnavailable, InvalidQuery
from contract.index.backend import MILVUS_EXTRAS, BackendConfig
from contract.index.docstore import FilterError
from contract.index.vector_index import IndexInfo, Rankings, as_matrix
from contract.milvus.expressions import META_FIELD, NAME_RE, filter_expression, literal, quote

if TYPE_CHECKING:
    from pymilvus import MilvusClient

    from contract.bundles.bundle import Manifest

logger = logging.getLogger(__name__)

# filter expressions live in contract/milvus/expressions.py; their names stay importable from here
__all__ = [
    "ID_FIELD",
    "META_FIELD",
    "METRIC_TYPES",
    "NAME_RE",
    "POS_FIELD",
    "TYPED_PREFIX",
    "VECTOR_FIELD",
    "MilvusIndex",
    "alias_name",
    "check_name",
    "collection_name",
    "connect",
    "filter_expression",
    "literal",
    "quote",
]

ID_FIELD, POS_FIELD, VECTOR_FIELD = "id", "pos", "vector"  # META_FIELD: contract/milvus/expressions.py
TYPED_PREFIX = "m_"
# what collection_name() appends for a contract.bundles.bundle.new_version_id() version
VERSION_SUFFIX = r"_v\d{8}T\d{6}_\d{6}Z_[0-9a-f]{6}$"
METRIC_TYPES = {"ip": "IP", "l2": "L2"}

_clients: dict[tuple[str, str], MilvusClient] = {}
_clients_lock = threading.Lock()


# -- names ------------------------------------------------------------------------------------------
def check_name(name: str) -> str:
    if not NAME_RE.match(name):
        raise ConfigError(
            f"Milvus name {name!r}: use letters, digits and '_' (at most 64, not a digit first)"
        )
    return name


def collection_name(name: str, version: str) -> str:
    """`<name>_v<version>` with the version's '.' and '-' as '_' (Milvus names are [A-Za-z0-9_])."""
    return f"{check_name(name)}_v{re.sub(r'[^A-Za-z0-9_]', '_', version)}"


def alias_name(name: str) -> str:
    return f"{check_name(name)}_live"


# -- connection -------------------------------------------------------------------------------------
def _check_uri(uri: str) -> None:
    if re.match(r"^(https?|tcp|unix)://", uri):
        return
    if not uri.endswith(".db"):
        raise ConfigError(
            f"Milvus URI {uri!r}: expected http://host:19530 (a cluster) or a milvus-lite path ending in .db"
        )


def connect(config: BackendConfig) -> MilvusClient:
    """A client for `config` (one per URI and token in this process; pymilvus clients are thread-safe).

    A milvus-lite `.db` path starts an embedded server in this process; several processes sharing one
    data set need a server (`python -m milvus_lite server`, or Milvus itself) and its http:// URI.
    """
    uri = config.milvus_uri or ""
    _check_uri(uri)
    key = (uri, config.milvus_token or "")
    with _clients_lock:
        client = _clients.get(key)
        if client is None:
            from pymilvus import MilvusClient  # imported on use: FAISS-only deployments do not need it

            try:
                client = MilvusClient(uri=uri, token=config.milvus_token or "", timeout=config.timeout_s)
            except Exception as exc:
                raise IndexUnavailable(f"Milvus at {uri} is unreachable: {error_brief(exc)}") from exc
            _clients[key] = client
    return client


def error_brief(exc: BaseException) -> str:
    message = getattr(exc, "message", None) or str(exc)
    return str(message).splitlines()[0][:300]


# -- the searcher -----------------------------------------------------------------------------------
class MilvusIndex:
    """A bundle version's collection, searched like a `VectorIndex` (rows are bundle positions)."""

    def __init__(self, client: MilvusClient, manifest: Manifest, config: BackendConfig):
        extras = manifest.extras.get(MILVUS_EXTRAS)
        if not isinstance(extras, dict) or "collection" not in extras:
            raise BundleInvalid(f"bundle {manifest.version}: manifest has no extras.{MILVUS_EXTRAS} record")
        self.client = client
        self.config = config
        self.info: IndexInfo = manifest.index.model_copy(deep=True)
        self.collection = check_name(str(extras["collection"]))
        self.alias = check_name(str(extras.get("alias") or alias_name(config.milvus_name)))
        self.index_metric = manifest.metric.index
        self.fields: dict[str, dict[str, str]] = dict(extras.get("fields") or {})
        self.search_params: dict[str, Any] = {
            "metric_type": METRIC_TYPES[self.index_metric],
            "params": dict(extras.get("search_params") or {}),
        }
        self._dim = manifest.dim
        self._ntotal = manifest.n_vectors
        # set by MilvusPointer.open_index: re-points a lagging alias when this version is CURRENT
        self.reconcile: Callable[[], bool] | None = None

    @classmethod
    def open(cls, config: BackendConfig, manifest: Manifest) -> MilvusIndex:
        """Connect, check the collection against the manifest (dimension, row count), load it."""
        index = cls(connect(config), manifest, config)
        try:
            if not index.client.has_collection(index.collection, timeout=config.timeout_s):
                raise BundleInvalid(
                    f"bundle {manifest.version}: Milvus collection {index.collection} does not exist "
                    f"at {config.milvus_uri}"
                )
            described = index.client.describe_collection(index.collection, timeout=config.timeout_s)
            dim = next(
                (int(f["params"]["dim"]) for f in described["fields"] if f["name"] == VECTOR_FIELD), None
            )
            if dim != manifest.dim:
                raise BundleInvalid(
                    f"bundle {manifest.version}: Milvus collection {index.collection} has vectors of "
                    f"dimension {dim}, the bundle's encoder has {manifest.dim} (dimension mismatch)"
                )
            index.client.load_collection(index.collection, timeout=config.timeout_s)
            rows = index.count_rows()
        except BundleInvalid:
            raise
        except Exception as exc:
            raise IndexUnavailable(f"Milvus at {config.milvus_uri}: {error_brief(exc)}") from exc
        if rows != manifest.n_vectors:
            raise BundleInvalid(
                f"bundle {manifest.version}: Milvus collection {index.collection} holds {rows} vectors, "
                f"the manifest says {manifest.n_vectors}"
            )
        return index

    def count_rows(self) -> int:
        """The collection's rows as a Strong-consistency count(*): a Milvus server's get_collection_stats
        counts only sealed segments, and its default Bounded consistency may not yet see rows written in the
        last seconds (milvus-lite does neither); Strong waits until every acknowledged row is visible, so the
        Bounded searches that follow see them all (issue 46, docs/deploy.md)."""
        found = self.client.query(
            self.collection,
            filter="",
            output_fields=["count(*)"],
            consistency_level="Strong",
            timeout=self.config.timeout_s,
        )
        return int(found[0]["count(*)"])

    @property
    def ntotal(self) -> int:
        return self._ntotal

    @property
    def dim(self) -> int:
        return self._dim

    def search(self, queries: np.ndarray, k: int, *, allowed: np.ndarray | None = None) -> Rankings:
        expr = ""
        if allowed is not None:
            positions = np.unique(np.asarray(allowed, dtype=np.int64))
            if len(positions) == 0:
                return [(np.zeros(0, np.int64), np.zeros(0, np.float32)) for _ in range(len(queries))]
            expr = f"{POS_FIELD} in [{', '.join(str(int(p)) for p in positions)}]"
        return self._search(self.collection, queries, k, expr)

    def search_filter(self, queries: np.ndarray, k: int, filter: Mapping[str, Any]) -> Rankings:
        return self._search(self.collection, queries, k, filter_expression(filter, self.fields))

    def _search(self, target: str, queries: np.ndarray, k: int, expr: str) -> Rankings:
        q = as_matrix(queries, "queries", self.dim, error=InvalidQuery)  # (nq, d)
        if k < 1:
            raise FilterError(f"k must be >= 1, got {k}")
        try:
            found = self.client.search(
                target,
                data=q.tolist(),
                filter=expr,
                limit=min(k, self.ntotal),
                output_fields=[POS_FIELD],
                search_params=self.search_params,
                anns_field=VECTOR_FIELD,
                timeout=self.config.timeout_s,
            )
        except Exception as exc:
            raise IndexUnavailable(f"Milvus search on {target} failed: {error_brief(exc)}") from exc
        rows: Rankings = []
        for hits in found:
            pos = np.fromiter((h["entity"][POS_FIELD] for h in hits), dtype=np.int64, count=len(hits))
            dist = np.fromiter((h["distance"] for h in hits), dtype=np.float32, count=len(hits))
            rows.append((pos, index_scores(dist, self.index_metric)))  # float32 either way
        return rows

    def readiness_problems(self) -> list[str]:
        """The alias exists, names this version's collection, and answers a search."""
        missing: str | None = None
        try:
            target = self.client.describe_alias(self.alias, timeout=self.config.timeout_s)["collection_name"]
        except Exception as exc:
            target, missing = None, f"Milvus alias {self.alias} is missing or unreadable ({error_brief(exc)})"
        if target != self.collection and self.reconcile is not None and self.reconcile():
            target = self.collection  # the alias lagged CURRENT (a publisher died before flipping it)
        elif missing is not None:
            return [missing]
        if target != self.collection:
            return [f"Milvus alias {self.alias} points at {target}, the live version's is {self.collection}"]
        probe = np.zeros((1, self.dim), np.float32)
        probe[0, 0] = 1.0
        try:
            answered = self._search(self.alias, probe, 1, "")
        except IndexUnavailable as exc:
            return [str(exc)]
        if not len(answered[0][0]):
            return [f"Milvus alias {self.alias} answered the canary with no results"]
        return []
