"""The mutation overlay: upserts and deletes applied in memory on top of one loaded bundle.

Contract module (the API serves through it). The published bundle's files are never touched, so its
checksums, hot swap and rollback stay valid; what the log changed lives here:

- tombstones: positions of the bundle's index whose document was deleted or replaced. The main index is
  searched with FAISS's id selector excluding them (`VectorIndex.search(excluded=...)`), so a query still
  gets k results when deleted documents held its top k.
- a `Scope` is what one request may return from the bundle: its metadata filter evaluated once on the
  docstore with the tombstones taken out (one set difference), or, unfiltered, the tombstones to exclude.
  The dense search here and the BM25 list of lexical / hybrid mode (app/engine/retrieval_modes.py) both
  take it, so a filtered hybrid query evaluates its filter once and both lists see one set of tombstones.
- the delta: new and replaced documents in a small exact FAISS index (IDMap2 over Flat, same metric as
  the bundle) searched alongside the main one; the two result lists are merged by score.
- delta documents: an in-memory SQLite table with the bundle docstore's schema, so metadata filters
  compile to the very same SQL (`contract.index.docstore.compile_filter`) and `include` sees the new fields.
- the lexical delta (contract/mutations/delta_lexical.py): the same delta documents' terms, scored with the
  bundle's BM25 statistics, so `lexical_search` (lexical and hybrid mode) sees a write or a delete at the
  same seq as `search` (dense) does.

A search result key is a main-index position (>= 0) or a delta slot s encoded as -(s + 1). Slots are
never reused and a delta row is kept (marked dead) when its document changes again, so a key resolved
after a concurrent apply still names the document the search saw.

`apply` is idempotent by seq: rows at or below `seq` are skipped, so replaying a log twice changes
nothing. One lock serialises applies with searches (FAISS indexes are not safe to mutate while searched).
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

import faiss
import numpy as np

from contract.bundles.bundle import seq_of_manifest
from contract.encoding.encoder import document_text
from contract.errors import ConfigError
from contract.index.backend import search_with_filter
from contract.index.docstore import INCLUDE_FIELDS, DocStore, compile_filter
from contract.index.lexical_index import LexicalIndex, analyze
from contract.index.vector_index import Rankings, VectorIndex, faiss_metric, faiss_search, hits_row
from contract.mutations.delta_lexical import DeltaLexical, merge
from contract.mutations.rows import Mutation, encoder_key

if TYPE_CHECKING:
    from contract.bundles.bundle import Bundle


@dataclass
class Scope:
    """The bundle positions one request may return, worked out once and shared by every index answering it.

    Unfiltered: every position but the tombstones (`excluded`). Filtered: `allowed`, the filter's
    positions in the docstore minus the tombstones, evaluated on first use (a Milvus index filters by
    itself, so a dense-only Milvus query never asks). `seq` is the overlay's seq when it was taken."""

    filter: Mapping[str, Any] | None
    excluded: np.ndarray  # tombstones (sorted int64), a snapshot
    seq: int
    docstore: DocStore = field(repr=False)

    @cached_property
    def allowed(self) -> np.ndarray | None:
        """Sorted int64 positions passing the filter and not deleted; None without a filter."""
        if not self.filter:
            return None
        positions = np.asarray(self.docstore.filter_positions(self.filter), dtype=np.int64)
        if not len(self.excluded):
            return positions
        return np.setdiff1d(positions, self.excluded, assume_unique=True)

    def restriction(self) -> dict[str, np.ndarray | None]:
        """`allowed` / `excluded` keywords of VectorIndex.search and LexicalIndex.search: exactly one set."""
        if self.filter:
            return {"allowed": self.allowed, "excluded": None}
        return {"allowed": None, "excluded": self.excluded if len(self.excluded) else None}


class Overlay:
    def __init__(
        self,
        index: VectorIndex,
        doc_ids: list[str],
        docstore: DocStore,
        *,
        base_seq: int,
        key: str,
        lexical: LexicalIndex | None = None,
    ):
        self.index = index
        self.lexical = lexical  # the bundle's BM25 (None: a bundle from before hybrid search)
        self._lexical_delta = None if lexical is None else DeltaLexical(lexical, self._docstore_avgdl)
        self.doc_ids = doc_ids
        self.docstore = docstore
        self.base_seq = base_seq  # the last seq folded into the bundle (manifest)
        self.seq = base_seq  # the last seq applied here
        self.key = key  # encoder identity: log vectors made with another encoder are re-encoded
        self.lock = threading.RLock()
        self._position: dict[str, int] | None = None  # id -> main position, built on the first apply
        self._dead: set[int] = set()
        self._dead_arr = np.zeros(0, np.int64)
        self._delta = faiss.IndexIDMap2(faiss.IndexFlat(index.dim, faiss_metric(index.info.metric)))
        self._slot_of: dict[str, int] = {}
        self._next_slot = 0
        self._rows = sqlite3.connect(":memory:", check_same_thread=False)
        self._rows.execute(
            "CREATE TABLE docs (position INTEGER PRIMARY KEY, id TEXT NOT NULL, title TEXT NOT NULL,"
            " text TEXT NOT NULL, metadata TEXT NOT NULL, live INTEGER NOT NULL, seq INTEGER NOT NULL)"
        )

    @classmethod
    def for_bundle(cls, bundle: Bundle) -> Overlay:
        """An empty overlay over a loaded bundle, positioned at the seq its manifest records."""
        m = bundle.manifest
        return cls(
            bundle.index,
            bundle.doc_ids,
            bundle.docstore,
            base_seq=seq_of_manifest(m.extras),
            key=encoder_key(m.files),
            lexical=bundle.lexical,
        )

    def _docstore_avgdl(self) -> float:
        """The bundle documents' mean length in BM25 terms, for bundles whose lexical.json predates it."""
        n = len(self.docstore)
        total = 0
        for start in range(0, n, 1000):
            rows = self.docstore.get(range(start, min(start + 1000, n)), ("title", "text"))
            total += sum(len(analyze(document_text(r["title"], r["text"]))) for r in rows)
        return total / max(n, 1)

    # -- state --------------------------------------------------------------------------------------
    @property
    def delta_docs(self) -> int:
        return len(self._slot_of)

    @property
    def tombstones(self) -> int:
        return len(self._dead)

    @property
    def changed(self) -> bool:
        return bool(self._dead or self._slot_of)

    def scope(self, filter_: Mapping[str, Any] | None = None) -> Scope:
        """What a request with `filter_` may return now (see `Scope`); the filter is evaluated lazily, once."""
        with self.lock:
            return Scope(filter_ or None, self._dead_arr, self.seq, self.docstore)

    def positions(self) -> dict[str, int]:
        if self._position is None:
            self._position = {d: i for i, d in enumerate(self.doc_ids)}
        return self._position

    # -- applying -----------------------------------------------------------------------------------
    def apply(self, entries: Iterable[Mutation], vectors: Mapping[int, np.ndarray]) -> int:
        """Apply log rows in seq order; `vectors[seq]` is the index-space row of each upsert. Returns
        how many rows were new here."""
        applied = 0
        with self.lock:
            positions = self.positions()
            for m in entries:
                if m.seq <= self.seq:
                    continue  # already folded into the bundle or applied: never twice
                self._remove(m.doc_id, positions)
                if m.op == "upsert":
                    self._add(m, vectors[m.seq])
                self.seq = m.seq
                applied += 1
            self._dead_arr = np.fromiter(sorted(self._dead), dtype=np.int64, count=len(self._dead))
        return applied

    def _remove(self, doc_id: str, positions: dict[str, int]) -> None:
        slot = self._slot_of.pop(doc_id, None)
        if slot is not None:
            self._delta.remove_ids(np.array([slot], dtype=np.int64))
            self._rows.execute("UPDATE docs SET live = 0 WHERE position = ?", (slot,))
            if self._lexical_delta is not None:
                self._lexical_delta.remove(slot)
            return
        pos = positions.get(doc_id)
        if pos is not None:
            self._dead.add(pos)

    def _add(self, m: Mutation, vector: np.ndarray) -> None:
        slot = self._next_slot
        self._next_slot += 1
        row = np.ascontiguousarray(vector, dtype=np.float32).reshape(1, -1)  # (1, dim)
        if row.shape[1] != self.index.dim:
            raise ConfigError(
                f"document {m.doc_id!r}: vector has {row.shape[1]} numbers, index {self.index.dim}"
            )
        self._delta.add_with_ids(row, np.array([slot], dtype=np.int64))
        self._rows.execute(
            "INSERT INTO docs VALUES (?, ?, ?, ?, ?, 1, ?)",
            (slot, m.doc_id, m.title, m.text, json.dumps(m.metadata, ensure_ascii=False), m.seq),
        )
        self._slot_of[m.doc_id] = slot
        if self._lexical_delta is not None:
            self._lexical_delta.add(slot, document_text(m.title, m.text))

    # -- searching ----------------------------------------------------------------------------------
    def search(
        self,
        queries: np.ndarray,
        k: int,
        *,
        filter_: Mapping[str, Any] | None = None,
        scope: Scope | None = None,
    ) -> Rankings:
        """Top-k per query over bundle + overlay: (keys int64, scores float32), best first.

        `scope` (from `scope()`, shared with the request's BM25 list) stands for `filter_`; one taken
        before a concurrent apply is retaken, so bundle and delta are always searched at one seq."""
        with self.lock:
            if scope is None or scope.seq != self.seq:
                scope = self.scope(filter_ if scope is None else scope.filter)
            main = self._search_main(queries, k, scope)
            if not self._slot_of:
                return main
            delta = self._search_delta(np.ascontiguousarray(queries, dtype=np.float32), k, scope.filter)
        out: Rankings = []
        for (mp, ms), (dp, ds) in zip(main, delta, strict=True):
            keys = np.concatenate([mp, -(dp + 1)])
            scores = np.concatenate([ms, ds])
            order = np.argsort(-scores, kind="stable")[:k]  # main first among equal scores
            out.append((keys[order], scores[order]))
        return out

    def _search_main(self, queries: np.ndarray, k: int, scope: Scope) -> Rankings:
        if isinstance(self.index, VectorIndex):
            return self.index.search(queries, k, **scope.restriction())
        # an index outside this process (Milvus, contract/index/backend.py): it filters by itself and
        # knows no tombstones, so ask for k + |tombstones| and drop them here (k stays full)
        excluded = scope.excluded
        extra = len(excluded)
        rows: Rankings = (
            search_with_filter(self.index, queries, k + extra, scope.filter, lambda: scope.allowed)
            if scope.filter
            else self.index.search(queries, k + extra)
        )
        if not extra:
            return rows
        out: Rankings = []
        for pos, sc in rows:
            keep = ~np.isin(pos, excluded)
            out.append((pos[keep][:k], sc[keep][:k]))
        return out

    def lexical_search(self, texts: Sequence[str], k: int, *, scope: Scope | None = None) -> Rankings:
        """BM25 top-k per text over bundle + overlay: (keys int64, scores float32), best first.

        The bundle's BM25 list takes `scope` (filter and tombstones, shared with the request's dense list);
        the delta documents are scored with the bundle's statistics (contract/mutations/delta_lexical.py)
        and merged by score, under the same lock and seq as `search`."""
        if self.lexical is None or self._lexical_delta is None:
            raise ConfigError("this bundle has no lexical index (built before hybrid search)")
        with self.lock:
            if scope is None or scope.seq != self.seq:
                scope = self.scope(None if scope is None else scope.filter)
            main = self.lexical.search(texts, k, **scope.restriction())
            if not self._slot_of:
                return main
            slots = self._live_slots(scope.filter) if scope.filter else None
            delta = self._lexical_delta.search(texts, k, slots)
        return [merge(m, d, k) for m, d in zip(main, delta, strict=True)]

    def _live_slots(self, filter_: Mapping[str, Any]) -> np.ndarray:
        """Delta slots of live documents passing `filter_` (the docstore's SQL, on the delta's table)."""
        where, args = compile_filter(filter_)
        sql = "SELECT position FROM docs WHERE live = 1" + (f" AND {where}" if where else "")
        return np.fromiter((r[0] for r in self._rows.execute(sql, args)), dtype=np.int64)

    def _search_delta(self, q: np.ndarray, k: int, filter_: Mapping[str, Any] | None) -> Rankings:
        params = None
        n = self._delta.ntotal
        if filter_:
            slots = self._live_slots(filter_)
            n = len(slots)
            sel = faiss.IDSelectorBatch(slots) if n else None
            params = faiss.SearchParameters(sel=sel) if sel is not None else None
        kk = min(k, n)
        if kk == 0:
            return [(np.zeros(0, np.int64), np.zeros(0, np.float32)) for _ in range(len(q))]
        dist, ids = faiss_search(self._delta, q, kk, params)  # (nq, kk): slots
        return [hits_row(dist[i], ids[i], self.index.info.metric) for i in range(len(q))]

    # -- documents ----------------------------------------------------------------------------------
    def doc_id(self, key: int) -> str:
        if key >= 0:
            return self.doc_ids[key]
        with self.lock:
            (doc_id,) = self._rows.execute("SELECT id FROM docs WHERE position = ?", (-key - 1,)).fetchone()
        return str(doc_id)

    def documents(self, keys: Sequence[int], include: Sequence[str]) -> list[dict[str, Any]]:
        """Documents for result keys, in order: {"position", "id", and the included fields}."""
        unknown = [f for f in include if f not in INCLUDE_FIELDS]
        if unknown:
            raise ConfigError(f"include: unknown field(s) {unknown} (allowed: {', '.join(INCLUDE_FIELDS)})")
        main = [k for k in keys if k >= 0]
        found = dict(zip(main, self.docstore.get(main, include), strict=True)) if main else {}
        for k in keys:
            if k < 0:
                found[k] = self._delta_doc(-k - 1, include)
        return [found[k] for k in keys]

    def _delta_doc(self, slot: int, include: Sequence[str]) -> dict[str, Any]:
        cols = ", ".join(["id", *include])  # names from the fixed whitelist
        with self.lock:
            row = self._rows.execute(f"SELECT {cols} FROM docs WHERE position = ?", (slot,)).fetchone()
        rec = dict(zip(["id", *include], row, strict=True))
        rec["position"] = -slot - 1
        if "metadata" in rec:
            rec["metadata"] = json.loads(rec["metadata"])
        return rec

    def get(self, doc_id: str) -> dict[str, Any] | None:
        """The document as served now (None: unknown or deleted), with `seq` of its last write (None:
        as published in the bundle)."""
        with self.lock:
            slot = self._slot_of.get(doc_id)
            if slot is not None:
                rec = self._delta_doc(slot, INCLUDE_FIELDS)
                (rec["seq"],) = self._rows.execute(
                    "SELECT seq FROM docs WHERE position = ?", (slot,)
                ).fetchone()
                return rec
            pos = self.positions().get(doc_id)
            if pos is None or pos in self._dead:
                return None
        rec = self.docstore.get([pos], INCLUDE_FIELDS)[0]
        rec["seq"] = None
        return rec

    def exists(self, doc_id: str) -> bool:
        with self.lock:
            if doc_id in self._slot_of:
                return True
            pos = self.positions().get(doc_id)
            return pos is not None and pos not in self._dead
