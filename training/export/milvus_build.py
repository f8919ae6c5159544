"""Publishing a bundle's vectors to Milvus: one collection per version, its index tuned to a recall target.

`milvus_builder(...)` returns a `build_bundle` index builder. Given the new version id and the
index-space vectors it

1. creates `<name>_v<version>` (schema: contract/milvus/index.py, training/export/milvus_rows.py) with the
   metadata keys that have one scalar type across the corpus as typed fields (`m_<key>`; at most MAX_TYPED_FIELDS, most common first);
2. inserts the rows in chunks of `chunk_rows` (a chunk's rows are the only Python copy at a time);
3. builds the vector index: `auto` = FLAT (exact) up to training.export.index_factory.AUTO_FLAT_MAX vectors, HNSW
   above, as for FAISS; `flat`, `hnsw`, `ivf` (IVF_FLAT) and `ivfpq` (IVF_PQ) on request. milvus-lite 3.2
   builds FLAT, HNSW, HNSW_SQ, IVF_FLAT and IVF_SQ8 (its index factory), not IVF_PQ: asking it for ivfpq
   is an IndexBuildError naming the server's answer;
4. tunes the search knob (HNSW ef, IVF nprobe) from cheapest up until recall@10 against exact search
   (FAISS Flat over the same vectors) on the tuning queries reaches the target — real held-out queries
   when given, else corpus rows with each row's own hit excluded, as training.export.index_factory does;
5. returns the IndexInfo (kind "milvus", reached recall, the knob) and `extras["milvus"]` (collection,
   alias, index type, build and search parameters, typed fields, seconds of steps 2, 3 and 4) for the
   manifest.

The collection is dropped again if any of this fails. Which collection the live alias names is decided
later, by BundleStore (through contract.milvus.pointer.MilvusPointer) after it writes CURRENT.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from contract.defaults import TARGET_RECALL
from contract.errors import IndexBuildError
from contract.index.backend import MILVUS_EXTRAS, MILVUS_KIND, BackendConfig
from contract.index.vector_index import IndexInfo, IndexMetric
from contract.milvus.index import (
    METRIC_TYPES,
    POS_FIELD,
    VECTOR_FIELD,
    alias_name,
    collection_name,
    connect,
)
from contract.milvus.pointer import drop_collection
from training.export.index_factory import (
    AUTO_FLAT_MAX,
    KINDS,
    IndexBuilder,
    ivf_lists,
    tune_to_recall,
)
from training.export.milvus_rows import CHUNK_ROWS, rows, schema, typed_fields
from training.export.shards import check_finite

if TYPE_CHECKING:
    from training.data.retrieval_data import Document

logger = logging.getLogger(__name__)

HNSW_BUILD = {"M": 32, "efConstruction": 200}  # M as training.export.index_factory.HNSW_M
INDEX_TYPES = {"flat": "FLAT", "hnsw": "HNSW", "ivf": "IVF_FLAT", "ivfpq": "IVF_PQ"}


def index_plan(kind: str, n: int, dim: int) -> tuple[str, dict[str, int], list[dict[str, int]]]:
    """(Milvus index type, build params, search params to try cheapest first)."""
    if kind not in KINDS:
        raise IndexBuildError(f"unknown index kind {kind!r} (expected one of {', '.join(KINDS)})")
    chosen = ("flat" if n <= AUTO_FLAT_MAX else "hnsw") if kind == "auto" else kind
    index_type = INDEX_TYPES[chosen]
    if index_type == "FLAT":
        return index_type, {}, [{}]
    if index_type == "HNSW":
        return index_type, dict(HNSW_BUILD), [{"ef": ef} for ef in (16, 32, 64, 128, 256, 512, 1024, 2048)]
    nlist = ivf_lists(n)
    probes = sorted({min(nlist, 2**i) for i in range(int(math.log2(nlist)) + 2)})
    build = {"nlist": nlist}
    if index_type == "IVF_PQ":
        m = max(1, dim // 8)
        while dim % m:
            m -= 1
        build |= {"m": m, "nbits": 8}
    return index_type, build, [{"nprobe": p} for p in probes]


def milvus_builder(
    config: BackendConfig,
    corpus: Mapping[str, Document],
    *,
    metric: IndexMetric,
    index_kind: str = "auto",
    target_recall: float = TARGET_RECALL,
    seed: int = 0,
) -> IndexBuilder:
    """A build_bundle index builder that publishes the vectors to a new Milvus collection."""
    plan = _Plan(config, corpus, metric, index_kind, target_recall, seed)

    def build(
        version: str, vectors: np.ndarray, queries: np.ndarray | None
    ) -> tuple[IndexInfo, dict[str, Any]]:
        name = collection_name(config.milvus_name, version)
        try:
            return plan.build(connect(config), name, vectors, queries)
        except BaseException:
            drop_collection(config, name)
            raise

    return build


@dataclass(frozen=True)
class _Plan:
    config: BackendConfig
    corpus: Mapping[str, Document]
    index_metric: IndexMetric
    index_kind: str
    target_recall: float
    seed: int

    def build(
        self, client: Any, name: str, vectors: np.ndarray, queries: np.ndarray | None
    ) -> tuple[IndexInfo, dict[str, Any]]:
        """Steps 1-5 of the module docstring; `vectors` (n, d) may be a memory map, read chunk by chunk."""
        t0 = time.perf_counter()
        x = vectors
        if x.ndim != 2 or x.dtype != np.float32:
            raise IndexBuildError(f"vectors must be a float32 (n, dim) matrix, got {x.dtype} {x.shape}")
        check_finite(x)
        n, dim = x.shape
        ids = list(self.corpus)
        if len(ids) != n:
            raise IndexBuildError(f"{n} vectors for {len(ids)} documents")
        fields = typed_fields(self.corpus[i].metadata for i in ids)
        index_type, build_params, grid = index_plan(self.index_kind, n, dim)
        if client.has_collection(name):  # create_collection would quietly reuse it
            raise IndexBuildError(f"Milvus collection {name} already exists (version ids are unique)")
        seconds: dict[str, float] = {}  # per step, in the manifest: what a bigger publish will cost
        try:
            _fill(client, name, ids, self.corpus, x, fields)
            seconds["insert"] = time.perf_counter() - t0
            _index(client, name, index_type, METRIC_TYPES[self.index_metric], build_params)
            seconds["index_load"] = time.perf_counter() - t0 - seconds["insert"]
        except IndexBuildError:
            raise
        except Exception as exc:
            message = getattr(exc, "message", None) or str(exc)
            raise IndexBuildError(
                f"Milvus refused {index_type} for collection {name}: {str(message).splitlines()[0]}"
            ) from exc
        search, recall, n_tune = _tune(
            client, name, x, queries, grid, self.index_metric, self.target_recall, self.seed
        )
        seconds["tune"] = time.perf_counter() - t0 - sum(seconds.values())
        info = IndexInfo(
            factory=f"milvus:{index_type}" + "".join(f",{k}={v}" for k, v in build_params.items()),
            kind=MILVUS_KIND,
            metric=self.index_metric,
            params=search,
            recall_at_10=recall,
            tune_queries=n_tune,
            ntotal=n,
            dim=dim,
            bytes_per_vector=float(4 * dim),  # the raw vector; the server's own index overhead is its own
            build_seconds=round(time.perf_counter() - t0, 3),
        )
        logger.info(
            "Milvus collection %s: %d vectors, %s %s, recall@10 %s", name, n, index_type, search, recall
        )
        record = {
            "collection": name,
            "alias": alias_name(self.config.milvus_name),
            "index_type": index_type,
            "build_params": build_params,
            "search_params": search,
            "metric_type": METRIC_TYPES[self.index_metric],
            "fields": fields,
            "step_seconds": {k: round(v, 3) for k, v in seconds.items()},
        }
        return info, {MILVUS_EXTRAS: record}


def _fill(
    client: Any,
    name: str,
    ids: list[str],
    corpus: Mapping[str, Document],
    x: np.ndarray,
    fields: Mapping[str, Mapping[str, str]],
) -> None:
    """Create the collection and insert its rows CHUNK_ROWS at a time."""
    id_length = max(len(i.encode("utf-8")) for i in ids)
    client.create_collection(name, schema=schema(client, x.shape[1], id_length, fields))
    for start in range(0, len(ids), CHUNK_ROWS):
        client.insert(name, rows(ids, corpus, x, start, fields))
    # a Milvus server keeps fresh rows in growing segments that its row count (get_collection_stats) does not
    # report and that the index does not cover until sealed; milvus-lite has no such split. Flushing seals
    # them, so the collection a version publishes is whole, indexed and counted (issue 46).
    client.flush(name)


def _index(client: Any, name: str, index_type: str, metric_type: str, build_params: dict[str, int]) -> None:
    """Build the vector index and load the collection.

    A create_index that outlives the client's deadline is retried by pymilvus, and the retry is refused
    with "index already exists" although the first call built it (seen with HNSW over 100k vectors on a
    loaded milvus-lite, bench/index/milvus_bench.py): an existing index of the asked type is accepted.
    """
    params = client.prepare_index_params()
    params.add_index(
        field_name=VECTOR_FIELD, index_type=index_type, metric_type=metric_type, params=build_params
    )
    try:
        client.create_index(name, params)
    except Exception as exc:
        if "already exists" not in str(getattr(exc, "message", None) or exc) or not _has_index(
            client, name, index_type
        ):
            raise
        logger.warning("Milvus %s: create_index was retried after the index was built; keeping it", name)
    client.load_collection(name)


def _has_index(client: Any, name: str, index_type: str) -> bool:
    for index_name in client.list_indexes(name, field_name=VECTOR_FIELD):
        if client.describe_index(name, index_name).get("index_type") == index_type:
            return True
    return False


def _tune(
    client: Any,
    name: str,
    x: np.ndarray,
    queries: np.ndarray | None,
    grid: list[dict[str, int]],
    metric: IndexMetric,
    target: float,
    seed: int,
) -> tuple[dict[str, int], float | None, int]:
    """The cheapest search params reaching `target` recall@10 vs exact search (FLAT: nothing to tune)."""
    if grid == [{}]:
        return {}, None, 0

    def search(q: np.ndarray, n: int, params: dict[str, int]) -> list[np.ndarray]:
        found = client.search(
            name,
            data=q.tolist(),
            limit=n,
            output_fields=[POS_FIELD],
            search_params={"metric_type": METRIC_TYPES[metric], "params": params},
            anns_field=VECTOR_FIELD,
            consistency_level="Strong",  # the rows were just written: the server's Bounded default may not see them
        )
        return [np.array([h["entity"][POS_FIELD] for h in hits], dtype=np.int64) for hits in found]

    real = queries if queries is not None and len(queries) else None  # none: corpus vectors stand in
    tuned = tune_to_recall(
        x, real, grid, search, metric=metric, target=target, seed=seed, label=f"Milvus {name}"
    )
    return tuned if tuned is not None else ({}, None, 0)
