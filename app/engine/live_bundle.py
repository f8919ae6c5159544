"""Search over one live bundle: encode queries, search the index, attach documents. No FastAPI here.

`LiveBundle` pairs a loaded `Bundle` with the query encoder chosen for it (torch or ONNX), so a
request that took a `LiveBundle` reference at its start uses one version end to end, even if a hot
swap happens meanwhile. Everything here is blocking (model / FAISS / SQLite work) and runs in the
inference executor, never on the event loop.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Protocol, overload

import numpy as np

from app.engine import query_vectors, retrieval_modes
from app.engine.encoder_choice import (
    ROUTED_BACKENDS,
    choose_encoder_backend,
    load_encoder_backend,
    routed_encoder,
)
from app.engine.query_cache import QueryCache
from app.engine.query_tokens import QueryTokenizer, TokenIds, encode_ids, encode_token_ids, shares_tokenizer
from app.engine.search_spec import (
    Answer,
    EmbedAnswer,
    EmbedSpec,
    PreparedQueries,
    SearchAnswer,
    SearchSpec,
    Spec,
)
from app.engine.serving_plan import available_cores
from app.schemas.search import Hit
from app.settings import Settings
from contract.bundles import parts
from contract.bundles.bundle import DOCS_FILE, Bundle, mismatches
from contract.defaults import MAX_NDCG_LOSS
from contract.encoding.encoder import Encoder, TextKind
from contract.encoding.spare_cores import widen
from contract.errors import BundleDamaged
from contract.index.vector_index import Rankings
from contract.mutations.overlay import Overlay

logger = logging.getLogger(__name__)

# Settings.encode_batch_size when unset. Measured on scifact queries (bench/serving/load_bench.py prints it):
# torch encodes one query in 11.9 ms but 4.9 ms/query in length-sorted chunks of 8. onnxruntime pays for
# padding more than it gains from batching unless a batch is cut into runs of similar lengths
# (contract/encoding/length_runs.py): so cut, int8 costs 1.87 ms a query in batches of 32 against 2.12 alone,
# fp32 4.55 against 6.17 (demo queries, one thread; bench/results/onnx_query_runs.txt). A distilled
# transformer is the ONNX case again; the static table costs microseconds either way.
DEFAULT_ENCODE_BATCH_SIZE = {"torch": 8, "onnx": 32, "onnx-int8": 32, "distilled": 32, "static": 64}
# routed encoders (app/engine/query_routing.py) batch each side by its own entry above; this is the batch
# a micro-batch waits for
DEFAULT_ENCODE_BATCH_SIZE |= {"static-routed": 64, "distilled-routed": 32}
# Backends whose micro-batches take what is pending and never wait for more (app/engine/batching.py): a
# batch saves them ~12-26% a query, not worth an idle encoder; torch's halves its cost, so it waits.
NEVER_WAIT = frozenset({"onnx", "onnx-int8", "distilled", "distilled-routed"})
# Documents per encoder call in encode_documents, the one document encoder of the API (upserts, /embed of
# documents, log rows re-encoded for a new model). scifact passages (239 tokens on average) cost 131, 99
# and 85 ms each in batches of 8, 16 and 32, and 171, 126, 126 ms with the order reversed
# (docs/bench-retired.md, doc_encode_batch, 2 cores at load average 4-6, so noisy; 32 never lost). Upserts reach it in
# slices of 8 and /embed in token slices, so only bulk re-encoding sees the difference.
DOCUMENT_ENCODE_BATCH = 32


class QueryEncoder(Protocol):
    # matches both Encoder.encode (kind: TextKind, plus batch_size/show_progress) and
    # OnnxQueryEncoder.encode (kind: str, plus batch_size); extra defaulted keywords are allowed
    def encode(self, texts: Sequence[str], *, kind: TextKind = ..., batch_size: int = ...) -> np.ndarray: ...


@dataclass
class LiveBundle:
    bundle: Bundle
    query_encoder: QueryEncoder
    encoder_backend: str  # torch | onnx | onnx-int8 | distilled | static | static-routed | distilled-routed
    # texts per encoder call inside one request or micro-batch (both encoders sort by length first);
    # also how many queries a micro-batch waits for (app/engine/batching.py), unless NEVER_WAIT
    encode_batch_size: int = 8
    loaded_at: float = field(default_factory=time.time)
    choice: dict[str, Any] | None = None  # how `auto` picked the backend (app/engine/encoder_choice.py)
    cache: QueryCache | None = None  # query embeddings (app/engine/query_cache.py); shared across bundles
    # documents upserted / deleted since the bundle was built (contract/mutations/overlay.py, app/live/mutation_applier.py)
    overlay: Overlay = field(init=False)
    tokenize: QueryTokenizer = field(
        init=False, repr=False
    )  # the model's tokenizer (app/engine/query_tokens.py)
    shares_ids: bool = field(init=False, repr=False)
    max_tokens: int = field(init=False, repr=False)  # the full model's max length
    # why a part of this bundle failed while serving (None: it did not); `on_damage` hears it once, from
    # whichever thread met it (app/live/hot_swap.py turns the replica not-ready and falls back)
    damage: str | None = None
    damaged_files: tuple[str, ...] = ()  # relative to the bundle folder, when the damage names them
    on_damage: Callable[[str], None] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self.overlay = Overlay.for_bundle(self.bundle)
        self.tokenize = QueryTokenizer(self.encoder)
        self.max_tokens = self.tokenize.max_length
        # the query encoder encodes the request's ids (no tokenisation of its own), when it can read them
        self.shares_ids = shares_tokenizer(self.query_encoder, self.tokenize)
        self.bundle.docstore.on_damage = partial(self.report_damage, files=(DOCS_FILE,))

    def report_damage(self, message: str, files: Sequence[str] = ()) -> None:
        if self.damage is not None:
            return
        self.damaged_files = tuple(files)
        self.damage = message
        logger.error("bundle %s: %s", self.version, message)
        if self.on_damage is not None:
            self.on_damage(message)

    def damage_problems(self) -> list[str]:
        """Readiness of the parts a request reads from disk (blocking): files unchanged since they loaded,
        the document store's first and last rows readable; a failure found here is reported as damage.

        A file whose stat changed is hashed against the manifest (parts.damaged_files): `touch` is not
        damage, a size change is at once, different bytes are after one hash."""
        b = self.bundle
        if self.damage is None and Path(b.path).is_dir():  # a deleted folder: consistency_problems says so
            changed = parts.damaged_files(Path(b.path), b.manifest.files, b.file_stats)
            if changed:
                shown = ", ".join(f"{self.version}/{rel}" for rel in changed[:5])
                self.report_damage(f"{shown} changed on disk since the bundle loaded", changed)
            else:
                with contextlib.suppress(BundleDamaged):  # reported by the docstore itself
                    b.docstore.probe()
        return [] if self.damage is None else [f"bundle {self.version} is damaged: {self.damage}"]

    def scrub(self) -> list[str]:
        """Hash every file of the bundle against the manifest's sha256 (blocking: reads the whole bundle,
        bench/index/scrub_bench.py measures the rate); damage found is reported. Returns the damaged files.

        A flipped byte keeps size and mtime, so no stat shows it: only reading the bytes does. The copy
        in memory serves on meanwhile; what the scrub protects is the next load (a fallback, a restart,
        another replica) and the operator's knowledge that the disk is going bad."""
        b = self.bundle
        if self.damage is not None or not Path(b.path).is_dir():
            return list(self.damaged_files)
        bad = parts.verify_files(Path(b.path), b.manifest.files, b.file_stats)
        if bad:
            shown = ", ".join(f"{self.version}/{rel}" for rel in bad[:5])
            self.report_damage(f"{shown} no longer match the manifest's sha256 (scrub)", bad)
        return bad

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
            "query_encoder": self.encoder_backend,
            "created_at": m.created_at.isoformat(),
            "code_version": m.code_version.model_dump(),
        }

    # -- blocking work --------------------------------------------------------------------------------
    def prepare_queries(
        self,
        texts: Sequence[str],
        token_ids: Sequence[Sequence[int] | None] | None = None,
        use_cache: bool = True,
    ) -> PreparedQueries:
        """Look `texts` up in the query cache, then tokenise only the misses, once (blocking; a request's
        own thread, before it queues). `token_ids` given are reused. A hit costs its lookup only: its
        entry carries its token count."""
        n = len(texts)
        if self.cache is not None and use_cache:
            found = self.cache.lookup([self.cache.key(self.version, self.encoder_backend, t) for t in texts])
        else:
            found = [None] * n
        cached = [None if e is None else e[0] for e in found]
        known = [None if e is None else e[1] for e in found]  # a hit's token count
        ids: list[list[int] | None] = [None] * n
        need = [i for i in range(n) if known[i] is None]  # the misses
        fresh = [i for i in need if token_ids is None or token_ids[i] is None]
        tokenised = dict(zip(fresh, self.tokenize([texts[i] for i in fresh]), strict=True)) if fresh else {}
        for i in need:
            ids[i] = tokenised[i] if i in tokenised else list(token_ids[i])  # type: ignore[index,arg-type]
        tokens = [k if k is not None else self.count_tokens(x or []) for k, x in zip(known, ids, strict=True)]
        # a hit stored without its count (not by this class) was tokenised only to count it
        ids = [x if c is None else None for x, c in zip(ids, cached, strict=True)]
        return PreparedQueries(tokens, ids, cached)

    def count_tokens(self, ids: Sequence[int]) -> int:
        """Tokens of one tokenised text as the full model encodes it (cut at its max length): the token
        budget's unit (app/engine/token_slicing.py)."""
        return min(len(ids), self.max_tokens)

    def encode_prepared(self, texts: Sequence[str], prepared: PreparedQueries) -> np.ndarray:
        """Index-space query vectors (n, dim) of prepared texts: the cached rows as they are, the misses
        encoded from their ids in one call and stored in the cache (blocking; the inference thread)."""
        missing = [i for i, row in enumerate(prepared.cached) if row is None]
        out = np.empty((len(texts), self.bundle.index.dim), dtype=np.float32)
        if missing:
            miss_texts = [texts[i] for i in missing]
            miss_ids = [prepared.token_ids[i] or [] for i in missing]
            computed = self._encode(miss_texts, miss_ids)  # (n_missing, dim)
            out[missing] = computed
            if self.cache is not None:
                keys = [self.cache.key(self.version, self.encoder_backend, t) for t in miss_texts]
                self.cache.store(keys, computed, [prepared.tokens[i] for i in missing])
        for i, row in enumerate(prepared.cached):
            if row is not None:
                out[i] = row
        return out

    @property
    def batch_wait(self) -> int:
        """Queries a micro-batch waits (up to its max wait) to hold: 1 = it never waits (NEVER_WAIT)."""
        return 1 if self.encoder_backend in NEVER_WAIT else self.encode_batch_size

    def encode(self, texts: Sequence[str], token_ids: TokenIds | None = None) -> np.ndarray:
        """Texts -> index-space query vectors (n, dim), through the query cache when there is one: each
        text tokenised once (`token_ids` when given), whichever encoder serves it."""
        return self.encode_prepared(texts, self.prepare_queries(texts, token_ids))

    def _encode(self, texts: list[str], token_ids: TokenIds) -> np.ndarray:
        if self.shares_ids:  # the request's ids, whatever the backend (app/engine/query_tokens.py)
            emb = encode_ids(self.query_encoder, texts, token_ids, batch_size=self.encode_batch_size)
        else:  # an encoder with a tokenizer of its own
            emb = self.query_encoder.encode(texts, kind="query", batch_size=self.encode_batch_size)
        return self.encoder.to_index_space(emb)  # (n, dim)

    def encode_documents(self, texts: Sequence[str], token_ids: TokenIds | None = None) -> np.ndarray:
        """Texts -> index-space document vectors (n, dim) with the full model, as the corpus was encoded
        (no cache: it holds queries). The one document encoder of the API: upserts, /embed, re-encoded
        log rows (app/live/mutation_applier.py)."""
        ids = token_ids if token_ids is not None else self.tokenize(texts)
        # a two-tower bundle (query-side retrain) encodes documents with its fixed document tower
        emb = encode_token_ids(self.encoder.documents, texts, ids, batch_size=DOCUMENT_ENCODE_BATCH)
        return self.encoder.to_index_space(emb)  # (n, dim)

    def vectors_to_index_space(self, vectors: Sequence[Sequence[float]], field_name: str) -> np.ndarray:
        """A request's raw vectors -> index-space queries (n, dim); 422 naming the field when unusable."""
        return query_vectors.to_index_space(self.encoder, self.bundle.index.dim, vectors, field_name)

    @overload
    def answer(self, spec: SearchSpec) -> SearchAnswer: ...

    @overload
    def answer(self, spec: EmbedSpec) -> EmbedAnswer: ...

    def answer(self, spec: Spec) -> Answer:
        """The per-request path: encode this request's texts, search them as one batch, fetch documents."""
        answer = self.answer_batch([spec])[0]
        if isinstance(answer, Exception):
            raise answer
        return answer

    def answer_batch(self, specs: Sequence[Spec]) -> list[Answer | Exception]:
        """A micro-batch: one encode call for every query text, one FAISS call for every unfiltered dense or
        hybrid query (and one BM25 call for the hybrid ones).

        Unfiltered queries are searched together with k = the largest requested top-k and cut per request;
        for an exact (flat) index the top k of a larger k are exactly the top k. Filtered queries need
        their own allowed set, so each filtered request is searched on its own. A failure is returned in
        the failing request's slot only, when it can be pinned to one request.
        """
        t0 = time.perf_counter()
        queries, spans = self._queries(specs)
        documents = {
            i: self.encode_documents(s.texts, s.token_ids)
            for i, s in enumerate(specs)
            if isinstance(s, EmbedSpec) and s.kind == "document"
        }
        t1 = time.perf_counter()
        rows = self._search(specs, queries, spans)
        t2 = time.perf_counter()
        encode_ms, search_ms = (t1 - t0) * 1000, (t2 - t1) * 1000
        out: list[Answer | Exception] = []
        for i, (s, r) in enumerate(zip(specs, rows, strict=True)):
            if isinstance(s, EmbedSpec):
                out.append(EmbedAnswer(documents[i] if i in documents else queries[spans[i]], encode_ms))
            elif isinstance(r, Exception):
                out.append(r)
            else:
                try:
                    hits = self.hits(r, min_score=s.min_score, include=s.include)
                    out.append(SearchAnswer(hits, encode_ms, search_ms))
                except Exception as exc:
                    out.append(exc)
        return out

    @staticmethod
    def _plain(s: Spec) -> bool:
        """Searched with every other plain spec of the batch in one FAISS call: dense or hybrid, no filter
        (a hybrid one's BM25 lists are also taken for the batch at once: retrieval_modes.fused_batch)."""
        return isinstance(s, SearchSpec) and not s.filter and s.mode in ("dense", "hybrid")

    def _queries(self, specs: Sequence[Spec]) -> tuple[np.ndarray, list[slice]]:
        """One (n, dim) matrix of the batch's index-space queries, and each spec's rows in it (empty: none,
        i.e. documents to embed, or lexical mode).

        Plain specs come first, so they are searched as one leading block without a copy; every query text
        is encoded in one call in that order, so without vector queries the encoder's output is the matrix."""
        order = sorted(range(len(specs)), key=lambda i: not self._plain(specs[i]))  # stable
        texts: list[str] = []
        prepared = PreparedQueries([], [], [])  # every text's, in `texts` order
        rows: list[tuple[int, np.ndarray | None]] = []  # (spec, its vectors; None = its texts' rows)
        for i in order:
            s = specs[i]
            if isinstance(s, EmbedSpec) and s.kind == "document":
                continue
            if isinstance(s, SearchSpec) and (s.mode == "lexical" or s.texts is None):
                if s.mode != "lexical":
                    rows.append((i, s.vectors))
                continue
            assert s.texts is not None
            texts += s.texts
            if isinstance(s, SearchSpec) and s.cached is not None and s.tokens is not None:
                part = PreparedQueries(s.tokens, s.token_ids or [None] * s.n, s.cached)  # by the route
            else:  # the canary, /embed queries: looked up and (the misses) tokenised once here
                part = self.prepare_queries(s.texts, s.token_ids)
            prepared.tokens += part.tokens
            prepared.token_ids += part.token_ids
            prepared.cached += part.cached
            rows.append((i, None))
        dim = self.bundle.index.dim
        encoded = self.encode_prepared(texts, prepared) if texts else np.empty((0, dim), np.float32)
        spans = [slice(0, 0)] * len(specs)
        pieces, n, used = [], 0, 0
        for i, vectors in rows:
            if vectors is None:
                vectors = encoded[used : used + specs[i].n]
                used += specs[i].n
            pieces.append(vectors)
            spans[i] = slice(n, n + len(vectors))
            n += len(vectors)
        if all(v is None for _, v in rows):
            return encoded, spans
        return np.concatenate(pieces) if pieces else np.empty((0, dim), np.float32), spans

    def _search(
        self, specs: Sequence[Spec], queries: np.ndarray, spans: list[slice]
    ) -> list[Rankings | Exception]:
        """(positions, scores) per query of each search spec: the plain ones (dense or hybrid, unfiltered) in
        one FAISS call (k = the largest top-k, or the fusion depth for hybrid) and one BM25 call, the rest
        alone. Before, every hybrid request searched FAISS and BM25 on its own: 237 CPU µs a query against
        about 164 for its share of the batched search, BM25 and fusion (bench/serving/hybrid_profile.py, demo corpus,
        batches of 32: bench/results/hybrid_profile_demo.txt)."""
        rows: list[Rankings | Exception] = [[] for _ in specs]
        plain = {i: s for i, s in enumerate(specs) if isinstance(s, SearchSpec) and self._plain(s)}
        if plain:  # the leading block of `queries` (see _queries)
            k = {
                i: s.top_k if s.mode == "dense" else retrieval_modes.depth(self.bundle, s.top_k)
                for i, s in plain.items()
            }
            scope = self.overlay.scope(None)  # one snapshot of the deletions for the dense and BM25 lists
            found = self.overlay.search(queries[: spans[max(plain)].stop], max(k.values()), scope=scope)
            for i, spec in plain.items():
                if spec.mode == "dense":
                    rows[i] = [(p[: spec.top_k], sc[: spec.top_k]) for p, sc in found[spans[i]]]
            hybrid = [i for i, s in plain.items() if s.mode == "hybrid"]
            if hybrid:
                fused = retrieval_modes.fused_batch(
                    self.bundle,
                    [plain[i].texts or [] for i in hybrid],
                    [found[spans[i]] for i in hybrid],
                    [plain[i].top_k for i in hybrid],
                    lexical=partial(self.overlay.lexical_search, scope=scope),
                )
                for i, request in zip(hybrid, fused, strict=True):
                    rows[i] = request
        for i, s in enumerate(specs):
            if isinstance(s, SearchSpec) and not self._plain(s):
                try:
                    # the filter evaluated once, and one snapshot of the deletions, for both lists of hybrid
                    scope = self.overlay.scope(s.filter)
                    rows[i] = (
                        self.overlay.search(queries[spans[i]], s.top_k, scope=scope)
                        if s.mode == "dense"
                        else retrieval_modes.rows(
                            self.bundle,
                            s.mode,
                            s.texts or [],
                            queries[spans[i]],
                            s.top_k,
                            dense=partial(self.overlay.search, scope=scope),
                            lexical=partial(self.overlay.lexical_search, scope=scope),
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


@dataclass(frozen=True)
class EncoderOptions:
    """How a bundle's query encoder is picked and run (Settings' encoder_* / routing fields): `threads` per
    encoder; `max_ndcg_loss`: what `auto` may give up for speed; `encode_batch_size` None = per backend;
    `routing`: `auto` may pick a routed encoder, `route_margin` sets its threshold by hand; the canary
    query stands in when the bundle records no timing queries."""

    threads: int = 0
    max_ndcg_loss: float = MAX_NDCG_LOSS
    encode_batch_size: int | None = None
    canary_query: str = "a query"
    routing: bool = True
    route_margin: float | None = None
    spare_cores: bool = True

    @classmethod
    def of(cls, settings: Settings) -> EncoderOptions:
        return cls(
            threads=settings.encoder_threads,
            max_ndcg_loss=settings.max_ndcg_loss,
            encode_batch_size=settings.encode_batch_size,
            canary_query=settings.canary_query,
            routing=settings.routing,
            route_margin=settings.route_margin,
            spare_cores=settings.encoder_spare_cores,
        )


def open_live_bundle(
    bundle: Bundle,
    encoder_backend: str,
    options: EncoderOptions | None = None,
    *,
    cache: QueryCache | None = None,
) -> LiveBundle:
    """Pick and load the query encoder for `bundle` (blocking)."""
    o = options or EncoderOptions()
    threads, max_ndcg_loss, route_margin = o.threads, o.max_ndcg_loss, o.route_margin
    choice = None
    if encoder_backend == "auto":
        encoder_backend, encoder, choice = choose_encoder_backend(
            bundle,
            max_ndcg_loss=max_ndcg_loss,
            threads=threads,
            fallback_query=o.canary_query,
            routing=o.routing,
        )
        if route_margin is not None and encoder_backend in ROUTED_BACKENDS:
            encoder, choice["routing"] = routed_encoder(
                bundle,
                encoder_backend,
                max_ndcg_loss=max_ndcg_loss,
                route_margin=route_margin,
                threads=threads,
            )
    elif encoder_backend in ROUTED_BACKENDS:
        encoder, record = routed_encoder(
            bundle, encoder_backend, max_ndcg_loss=max_ndcg_loss, route_margin=route_margin, threads=threads
        )
        choice = {"chosen": encoder_backend, "max_ndcg_loss": max_ndcg_loss, "routing": record}
    else:
        encoder = load_encoder_backend(bundle, encoder_backend, threads=threads)
    batch = o.encode_batch_size or DEFAULT_ENCODE_BATCH_SIZE[encoder_backend]
    if o.spare_cores:  # after `auto` has timed its candidates, on the threads the plan gives them
        widen(encoder, threads, available_cores())
    return LiveBundle(bundle, encoder, encoder_backend, batch, choice=choice, cache=cache)
