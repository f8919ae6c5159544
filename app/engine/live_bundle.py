"""Search over one live bundle: encode queries, search the index, attach documents. No FastAPI here.

`LiveBundle` pairs a loaded `Bundle` with the query encoder chosen for it (torch or ONNX), so a
request that took a `LiveBundle` reference at its start uses one version end to end, even if a hot
swap happens meanwhile. Everything here is blocking (model / FAISS / SQLite work) and runs in the
inference executor, never on the event loop.
"""

from __future__ import annotations

import copy
import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from app.engine import query_vectors, retrieval_modes
from app.engine.encoder_choice import choose_backend, load_backend
from app.engine.query_cache import QueryCache
from app.engine.search_spec import SearchAnswer, SearchSpec
from app.schemas.search import Hit
from contract.bundles.bundle import Bundle, mismatches
from contract.encoding.encoder import Encoder, TextKind
from contract.index.vector_index import Rankings
from contract.mutations.overlay import Overlay

logger = logging.getLogger(__name__)

# Settings.encode_batch_size when unset. Measured on scifact queries (bench/load_bench.py prints it):
# torch encodes one query in 11.9 ms but 4.9 ms/query in length-sorted chunks of 8; onnxruntime costs
# about the same either way (int8 2.1 vs 1.9 ms), so for it batching texts only adds padding.
# A distilled transformer is the ONNX case again; the static table costs microseconds either way.
DEFAULT_ENCODE_BATCH_SIZE = {"torch": 8, "onnx": 1, "onnx-int8": 1, "distilled": 1, "static": 64}


class QueryEncoder(Protocol):
    # matches both Encoder.encode (kind: TextKind, plus batch_size/show_progress) and
    # OnnxQueryEncoder.encode (kind: str, plus batch_size); extra defaulted keywords are allowed
    def encode(self, texts: Sequence[str], *, kind: TextKind = ..., batch_size: int = ...) -> np.ndarray: ...


@dataclass
class LiveBundle:
    bundle: Bundle
    query_encoder: QueryEncoder
    backend: str  # torch | onnx | onnx-int8 | distilled | static
    # texts per encoder call inside one request or micro-batch (both encoders sort by length first);
    # also how many queries a micro-batch waits for (app/engine/batching.py)
    encode_batch_size: int = 8
    loaded_at: float = field(default_factory=time.time)
    choice: dict[str, Any] | None = None  # how `auto` picked the backend (app/engine/encoder_choice.py)
    cache: QueryCache | None = None  # query embeddings (app/engine/query_cache.py); shared across bundles
    # documents upserted / deleted since the bundle was built (contract/mutations/overlay.py, app/live/mutation_applier.py)
    overlay: Overlay = field(init=False)
    _counter: Any = field(init=False, default=None, repr=False)  # count_tokens' own tokenizer copy
    _count_lock: threading.Lock = field(init=False, default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        self.overlay = Overlay.for_bundle(self.bundle)

    @property
    def version(self) -> str:
        return self.bundle.version

    @property
    def encoder(self) -> Encoder:
        return self.bundle.encoder

    @property
    def n_vectors(self) -> int:
        return self.bundle.index.ntotal

    def consistency_problems(self) -> list[str]:
        """Why encoder, index and documents might not belong together (empty = consistent).

        The parts against the manifest are contract.bundles.bundle.mismatches, the check load_bundle ends with;
        the folder, the version and the encoder's source are what can drift while a bundle serves."""
        b, m = self.bundle, self.bundle.manifest
        problems = []
        if not Path(b.path).is_dir():  # deleted while serving: this process still holds it in memory
            problems.append(f"bundle folder {Path(b.path).name} is gone from disk")
        if m.version != self.version:
            problems.append(f"manifest version {m.version} != bundle {self.version}")
        if Path(self.encoder.source).resolve().parent != Path(b.path).resolve():
            problems.append(f"encoder {self.encoder.source} is not from bundle folder {b.path}")
        return problems + mismatches(b)

    def serving_summary(self) -> dict[str, Any]:
        """What this bundle serves with: base model, similarity, index, query encoder, code version (the
        `model` of /generalization-gap and /ui/overview; the report's own `model` is the trained one)."""
        m = self.bundle.manifest
        return {
            "base_model": m.base_model,
            "metric": m.metric.similarity,
            "index_metric": m.metric.index,
            "dim": m.dim,
            "temperature": self.encoder.similarity.effective_temperature(),  # contract.encoding.similarity
            "index": m.index.factory,
            "n_vectors": m.n_vectors,
            "query_encoder": self.backend,
            "created_at": m.created_at.isoformat(),
            "code_version": m.code_version.model_dump(),
        }

    # -- blocking work --------------------------------------------------------------------------------
    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Texts -> index-space query vectors (n, dim), through the query cache when there is one."""
        if self.cache is not None:
            return self.cache.encode(self.version, self.backend, texts, self._encode)
        return self._encode(list(texts))

    def _encode(self, texts: list[str]) -> np.ndarray:
        emb = self.query_encoder.encode(texts, kind="query", batch_size=self.encode_batch_size)  # (n, dim)
        return self.encoder.to_index_space(emb)  # (n, dim)

    def encode_documents(self, texts: Sequence[str]) -> np.ndarray:
        """Texts -> index-space document vectors (n, dim) with the full model (no cache: it holds queries)."""
        emb = self.encoder.encode(list(texts), kind="document", batch_size=DEFAULT_ENCODE_BATCH_SIZE["torch"])
        return self.encoder.to_index_space(emb)  # (n, dim)

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """Tokens per text as the serving model sees them (its tokenizer, cut at its max length).

        Runs on request threads while the inference thread encodes: a fast tokenizer keeps its padding
        and truncation mode as state, so sharing the model's one made a concurrent encode fail ("expected
        sequence of length 18 at dim 1 (got 10)", tests/app/test_lifecycle.py's hot swap under load).
        Requests count with a copy of it, one at a time."""
        model = self.encoder.model
        limit = int(model.max_seq_length or 512)
        with self._count_lock:
            if self._counter is None:
                self._counter = copy.deepcopy(model.tokenizer)
            ids = self._counter(list(texts), add_special_tokens=True, truncation=True, max_length=limit)
        return [len(row) for row in ids["input_ids"]]

    def vectors_to_index_space(self, vectors: Sequence[Sequence[float]], field_name: str) -> np.ndarray:
        """A request's raw vectors -> index-space queries (n, dim); 422 naming the field when unusable."""
        return query_vectors.to_index_space(self.encoder, self.bundle.index.dim, vectors, field_name)

    def run(self, spec: SearchSpec) -> SearchAnswer:
        """The per-request path: encode this request's queries, search them as one batch, fetch documents."""
        return self.run_many([spec])[0]  # type: ignore[return-value]

    def run_many(self, specs: Sequence[SearchSpec]) -> list[SearchAnswer | Exception]:
        """A micro-batch: one encode call for every text, one FAISS call for every unfiltered query.

        Unfiltered queries are searched together with k = the largest requested k and cut per request;
        for an exact (flat) index the top k of a larger k are exactly the top k. Filtered queries need
        their own allowed set, so each filtered request is searched on its own. A failure is returned in
        the failing request's slot only, when it can be pinned to one request.
        """
        t0 = time.perf_counter()
        queries = self._queries(specs)
        t1 = time.perf_counter()
        rows = self._search(specs, queries)
        t2 = time.perf_counter()
        encode_ms, search_ms = (t1 - t0) * 1000, (t2 - t1) * 1000
        out: list[SearchAnswer | Exception] = []
        for i, (s, r) in enumerate(zip(specs, rows, strict=True)):
            if s.embed is not None:
                out.append(SearchAnswer([], encode_ms, 0.0, vectors=queries[i]))
                continue
            if isinstance(r, Exception):
                out.append(r)
                continue
            try:
                out.append(
                    SearchAnswer(self.hits(r, min_score=s.min_score, include=s.include), encode_ms, search_ms)
                )
            except Exception as exc:
                out.append(exc)
        return out

    def _queries(self, specs: Sequence[SearchSpec]) -> list[np.ndarray]:
        """Each spec's index-space queries (n_i, dim): every text encoded in one call, vectors as given."""
        texts = [
            t
            for s in specs
            if s.texts is not None and s.embed != "document" and s.mode != "lexical"
            for t in s.texts
        ]
        encoded = self.encode(texts) if texts else None  # (n_texts, dim)
        queries: list[np.ndarray] = []
        offset = 0
        for s in specs:
            if s.embed == "document":  # /embed of documents: the full model, as the corpus was encoded
                assert s.texts is not None
                queries.append(self.encode_documents(s.texts))
            elif s.mode == "lexical":  # BM25 only: nothing to encode
                queries.append(np.empty((0, self.bundle.index.dim), dtype=np.float32))
            elif s.texts is not None:
                assert encoded is not None
                queries.append(encoded[offset : offset + len(s.texts)])
                offset += len(s.texts)
            else:
                assert s.vectors is not None
                queries.append(s.vectors)
        return queries

    def _search(self, specs: Sequence[SearchSpec], queries: list[np.ndarray]) -> list[Rankings | Exception]:
        """(positions, scores) per query of each search spec: plain dense ones in one call, the rest alone."""
        rows: list[Rankings | Exception] = [[] for _ in specs]
        plain = [i for i, s in enumerate(specs) if not s.filter and s.embed is None and s.mode == "dense"]
        if plain:
            stacked = np.concatenate([queries[i] for i in plain])  # (n_plain, dim)
            found = self.overlay.search(stacked, max(specs[i].k for i in plain))
            start = 0
            for i in plain:
                n = len(queries[i])
                rows[i] = [(p[: specs[i].k], sc[: specs[i].k]) for p, sc in found[start : start + n]]
                start += n
        for i, s in enumerate(specs):
            if s.embed is None and (s.filter or s.mode != "dense"):
                try:
                    # the filter evaluated once, and one snapshot of the deletions, for both lists of hybrid
                    scope = self.overlay.scope(s.filter)
                    rows[i] = (
                        self.overlay.search(queries[i], s.k, scope=scope)
                        if s.mode == "dense"
                        else retrieval_modes.rows(
                            self.bundle,
                            s.mode,
                            s.texts or [],
                            queries[i],
                            s.k,
                            scope,
                            dense=partial(self.overlay.search, scope=scope),
                        )
                    )
                except Exception as exc:  # one request's bad filter must not fail its batch-mates
                    rows[i] = exc
        return rows

    def hits(
        self, rows: list[tuple[np.ndarray, np.ndarray]], *, min_score: float | None, include: Sequence[str]
    ) -> list[list[Hit]]:
        """Positions -> documents; `min_score` cut; only the requested fields."""
        doc_id = self.overlay.doc_id  # bundle positions and delta keys alike
        if min_score is not None:
            rows = [(pos[sc >= min_score], sc[sc >= min_score]) for pos, sc in rows]
        docs: dict[int, Any] = {}
        if include:
            wanted = sorted({int(p) for pos, _ in rows for p in pos})
            docs = dict(zip(wanted, self.overlay.documents(wanted, include), strict=True))
        out = []
        for pos, sc in rows:
            hits = []
            for p, s in zip(pos.tolist(), sc.tolist(), strict=True):
                hit = Hit(id=doc_id(p), score=s)
                if include:
                    doc = docs[p]
                    hit.title = doc.get("title")
                    hit.text = doc.get("text")
                    hit.metadata = doc.get("metadata")
                hits.append(hit)
            out.append(hits)
        return out


def open_live_bundle(
    bundle: Bundle,
    backend: str,
    *,
    threads: int = 0,
    max_ndcg_loss: float = 0.005,
    encode_batch_size: int | None = None,
    cache: QueryCache | None = None,
    canary_query: str = "a query",
) -> LiveBundle:
    """Pick and load the query encoder for `bundle` (blocking); `encode_batch_size` None = per backend."""
    choice = None
    if backend == "auto":
        backend, encoder, choice = choose_backend(
            bundle, max_ndcg_loss=max_ndcg_loss, threads=threads, fallback_query=canary_query
        )
    else:
        encoder = load_backend(bundle, backend, threads=threads)
    batch = encode_batch_size or DEFAULT_ENCODE_BATCH_SIZE[backend]
    return LiveBundle(bundle, encoder, backend, batch, choice=choice, cache=cache)
