"""Documents changed through the API: write to the shared mutation log, apply it to the live bundle.

The log (contract/mutations/log.py, `<bundles>/mutations.sqlite`) is the source of truth; every replica
applies it to the bundle it serves (contract/mutations/overlay.py):

- the replica that took a write (`upsert`, `delete`: what the /documents routes call) encodes it, commits
  it to the log, then applies the log up to it before answering (read-your-writes);
- every replica applies what others wrote on each tick of the poller that follows CURRENT, so a write
  is visible everywhere within `reload_poll_seconds`;
- a bundle being loaded (startup, hot swap, rollback) replays the rows after the seq its manifest
  records, and once more under the apply lock right before it is swapped in, so a write acknowledged
  while it loaded is not lost in the swap.

Rows whose vector was made by another encoder (a retrain went live since) are re-encoded here with the
serving bundle's document encoder. Applying is serialised by one asyncio lock per process; the
overlay's own lock keeps searches consistent while a batch lands.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import socket
import time
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np
from prometheus_client import Gauge

from app.engine.batching import Inference
from app.engine.live_bundle import LiveBundle
from app.metrics import AppMetrics
from app.schemas.documents import MutationResponse
from app.settings import Settings
from contract.encoding.encoder import document_text
from contract.mutations.log import MutationLog, MutationLogError, NewDocument, ReplicaState


class LiveSlot(Protocol):
    """Where the served bundle is held: `live` is swapped by one assignment (app.live.hot_swap.HotSwap is
    one; it imports this module)."""

    live: LiveBundle | None

    def require(self) -> LiveBundle: ...


logger = logging.getLogger(__name__)

REPLICA_HEARTBEAT_S = 30.0  # a replica re-records its state at least this often while it runs
REPLICA_SEEN_S = 300.0  # /bundles lists replicas that recorded their state within this window
ENCODE_SLICE = 8  # documents per encoder call in an upsert (each call holds the inference thread)


def document_texts(docs: Sequence[Any]) -> list[str]:
    """What the document encoder reads of each document (title, then text), as when the corpus was indexed."""
    return [document_text(d.title, d.text) for d in docs]


class MutationApplier:
    """One per API process: the log handle, the apply lock, the replica record and the metrics; `slot`
    holds the bundle this process serves (its HotSwap)."""

    def __init__(self, settings: Settings, metrics: AppMetrics, slot: LiveSlot):
        self.settings = settings
        self.slot = slot
        self.log = MutationLog(settings.bundles_dir)
        # /bundles is public: replicas appear under an opaque id; the log line below maps it to host:pid
        where = f"{socket.gethostname()}:{os.getpid()}"
        self.replica = hashlib.sha256(f"{where}:{time.time_ns()}".encode()).hexdigest()[:12]
        logger.info("this API process is replica %s (%s) in the mutation log", self.replica, where)
        self._lock = asyncio.Lock()
        self._recorded: tuple[Any, ...] | None = None
        self._recorded_at = 0.0
        r = metrics.registry
        self.head_gauge = Gauge(
            "search_mutation_log_seq", "Newest seq in the shared mutation log.", registry=r
        )
        self.applied_gauge = Gauge(
            "search_mutation_applied_seq", "Last log seq applied to the live bundle here.", registry=r
        )
        self.delta_gauge = Gauge(
            "search_mutation_delta_docs", "Documents in the live bundle's delta index.", registry=r
        )
        self.tomb_gauge = Gauge(
            "search_mutation_tombstones", "Live bundle rows hidden as deleted or replaced.", registry=r
        )
        self.compaction_gauge = Gauge(
            "search_compaction_suggested",
            "1 when delta docs + tombstones reach SEARCH_COMPACTION_THRESHOLD: run a reindex job.",
            registry=r,
        )

    # -- blocking work (threads) --------------------------------------------------------------------
    def replay(self, live: LiveBundle, upto: int | None = None) -> int:
        """Apply the log rows after `live.overlay.seq` (up to `upto`) to `live`. Returns rows applied."""
        overlay = live.overlay
        entries = self.log.entries(overlay.seq, upto)
        if not entries:
            return 0
        vectors: dict[int, np.ndarray] = {}
        stale = []
        for m in entries:
            if m.op != "upsert":
                continue
            if (
                m.vector is not None
                and m.encoder_key == overlay.key
                and len(m.vector) == live.bundle.index.dim
            ):
                vectors[m.seq] = m.vector
            else:
                stale.append(m)
        if stale:  # written while another model served: this encoder's vectors, kept or made now
            vectors.update(self._vectors_for(live, stale))
        applied = overlay.apply(entries, vectors)
        if applied:
            logger.debug(
                "bundle %s: applied %d log row(s), now at seq %d", live.version, applied, overlay.seq
            )
        return applied

    def _vectors_for(self, live: LiveBundle, stale: list[Any]) -> dict[int, np.ndarray]:
        """Vectors of `live`'s encoder for rows another encoder wrote: those kept in the log (any replica
        made them before), the rest encoded here once and kept for the next time this encoder serves."""
        key, dim = live.overlay.key, live.bundle.index.dim
        kept = {
            s: v for s, v in self.log.stored_vectors(key, [m.seq for m in stale]).items() if len(v) == dim
        }
        missing = [m for m in stale if m.seq not in kept]
        if not missing:
            return kept
        logger.info("re-encoding %d logged document(s) for bundle %s", len(missing), live.version)
        made = dict(
            zip([m.seq for m in missing], live.encode_documents(document_texts(missing)), strict=True)
        )
        try:
            self.log.store_vectors(key, made)
        except MutationLogError:  # a read-only log: serve them all the same, encode again next time
            logger.warning(
                "could not keep %d re-encoded vector(s) in the mutation log", len(made), exc_info=True
            )
        return kept | made

    # -- event loop ---------------------------------------------------------------------------------
    async def upsert(self, docs: list[NewDocument], inference: Inference) -> MutationResponse:
        """Encode validated documents with the live model, commit them to the log in one transaction,
        apply the log here and describe the write. Encoding runs on the model's thread in slices, so
        searches queued meanwhile run between them (the fair-slicing idea of app/engine/token_slicing.py)."""
        live = self.slot.require()
        texts = document_texts(docs)
        parts = [
            await inference.call(live.encode_documents, texts[i : i + ENCODE_SLICE])
            for i in range(0, len(texts), ENCODE_SLICE)
        ]
        vectors = np.concatenate(parts)  # (n, dim)
        first, last = await asyncio.to_thread(self.log.append_upserts, docs, vectors, live.overlay.key)
        return await self._applied(live, first, last, len(docs))

    async def delete(self, ids: list[str]) -> MutationResponse:
        """Commit deletes of distinct ids to the log, apply it here; ids nothing serves are `not_found`."""
        live = self.slot.require()
        await self.catch_up()  # judge `not_found` against everything logged so far
        live = self.slot.live or live
        missing = await asyncio.to_thread(lambda: [i for i in ids if not live.overlay.exists(i)])
        # every id is logged (a delete racing an upsert of the same id on another replica still wins, and
        # a retried delete stays idempotent), but `applied` counts the documents deleted: an id nothing
        # served deleted nothing, and says so in `not_found` alone (issue 32)
        first, last = await asyncio.to_thread(self.log.append_deletes, ids)
        answer = await self._applied(live, first, last, len(ids) - len(missing))
        answer.not_found = missing
        return answer

    async def _applied(self, live: LiveBundle, first: int, last: int, n: int) -> MutationResponse:
        """Apply the log up to the new rows here (read-your-writes), then describe the write."""
        try:
            await self.catch_up()
        except Exception:  # committed all the same: the poller applies it on its next tick
            logger.exception("write %d..%d is in the log but could not be applied here yet", first, last)
        serving = self.slot.live or live
        return MutationResponse(
            applied=n, first_seq=first, seq=last, version=serving.version, live_seq=serving.overlay.seq
        )

    async def catch_up(self) -> None:
        """Apply everything in the log to what this process serves now (writes and poller ticks)."""
        async with self._lock:
            live = self.slot.live
            if live is not None:
                await asyncio.to_thread(self.replay, live)
            await asyncio.to_thread(self._observe, live)

    async def swap_in(self, live: LiveBundle) -> LiveBundle | None:
        """Bring a freshly loaded bundle up to the log's head and make it live, under the apply lock."""
        async with self._lock:
            await asyncio.to_thread(self.replay, live)
            previous, self.slot.live = self.slot.live, live  # the swap: one reference
        await asyncio.to_thread(self._observe, live)
        return previous

    def _observe(self, live: LiveBundle | None) -> None:
        """Metrics, and this replica's row in the log's replicas table (when it changed, or a heartbeat)."""
        try:
            head = self.log.head()
        except Exception:  # an unreadable log is reported by the write routes; metrics must not fail
            logger.exception("mutation log unreadable")
            return
        self.head_gauge.set(head)
        if live is None:
            return
        o = live.overlay
        self.applied_gauge.set(o.seq)
        self.delta_gauge.set(o.delta_docs)
        self.tomb_gauge.set(o.tombstones)
        self.compaction_gauge.set(1 if self.compaction_suggested(live) else 0)
        state = (live.version, o.seq, o.delta_docs, o.tombstones)
        now = time.time()
        if not self.log.exists() or (
            state == self._recorded and now - self._recorded_at < REPLICA_HEARTBEAT_S
        ):
            return
        try:
            self.log.record_replica(ReplicaState(self.replica, *state, updated_at=now))
        except Exception:
            logger.exception("could not record this replica's state in the mutation log")
            return
        self._recorded, self._recorded_at = state, now

    def compaction_suggested(self, live: LiveBundle) -> bool:
        o = live.overlay
        return o.delta_docs + o.tombstones >= self.settings.compaction_threshold

    def describe(self, live: LiveBundle | None) -> dict[str, Any]:
        """The `mutations` section of GET /bundles (blocking: reads the log). An unreadable log is
        reported here rather than failing the whole listing."""
        try:
            return self._describe(live)
        except MutationLogError as exc:
            return {"error": str(exc), "replica": self.replica}

    def _describe(self, live: LiveBundle | None) -> dict[str, Any]:
        head = self.log.head()
        out: dict[str, Any] = {
            "log_seq": head,
            "replica": self.replica,
            "compaction_threshold": self.settings.compaction_threshold,
            "replicas": [
                {
                    "replica": r.replica,
                    "version": r.version,
                    "applied_seq": r.applied_seq,
                    "delta_docs": r.delta_docs,
                    "tombstones": r.tombstones,
                    "updated_at": r.updated_at,
                }
                for r in self.log.replicas(REPLICA_SEEN_S)
            ],
        }
        if live is not None:
            o = live.overlay
            suggested = self.compaction_suggested(live)
            out |= {
                "bundle_seq": o.base_seq,
                "applied_seq": o.seq,
                "delta_docs": o.delta_docs,
                "tombstones": o.tombstones,
                "compaction_suggested": suggested,
                "compaction_reason": (
                    f"{o.delta_docs} delta documents + {o.tombstones} tombstones >= "
                    f"{self.settings.compaction_threshold}: run a reindex job (POST /jobs type=reindex) to fold "
                    "the log into a new bundle"
                    if suggested
                    else None
                ),
            }
        return out
