"""The bundle holder: which bundle this process serves, and hot swapping it.

Starlette hands every request a shallow copy of the lifespan state, so the state holds this *holder*
and a swap rebinds `holder.live` — one reference assignment. A request reads `holder.live` once at
its start and keeps that `LiveBundle` to the end, so a swap mid-request never mixes versions and the
old bundle lives until its last request finishes (garbage collection frees it).

Loading (read + checksum + validate + load the encoder + canary query) runs in a worker thread, off the
event loop. Only a bundle that passed all of it is swapped in; a failed load keeps the old bundle
serving, is logged, and shows in GET /bundles as `last_failed_load`. A version that failed is not
retried on every poll, only when CURRENT changes again or someone activates it explicitly.

Several API processes may share one bundles folder: they only read it and follow CURRENT by polling
(`reload_poll_seconds`); POST /bundles/{v}/activate rewrites CURRENT (atomically, via BundleStore).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from datetime import UTC, datetime
from typing import Any

from app.errors import NoLiveBundleError
from app.metrics import AppMetrics
from app.query_cache import QueryCache
from app.schemas import BundleEntry, BundlesResponse, LoadFailure
from app.service import LiveBundle, SearchSpec, open_live_bundle
from app.settings import Settings
from training.bundle import BundleStore, load_bundle
from training.errors import BundleInvalid, InfonceSearchError

logger = logging.getLogger(__name__)

GATE_LOG = "gate.jsonl"  # BundleStore's append-only decision log (docs/architecture.md)


class BundleHolder:
    def __init__(self, settings: Settings, metrics: AppMetrics):
        self.settings = settings
        self.metrics = metrics
        self.store = BundleStore(settings.bundles_dir)
        self.live: LiveBundle | None = None
        self.last_failure: LoadFailure | None = None
        self._failed: set[str] = set()
        self._lock = asyncio.Lock()  # one load at a time
        self._poller: asyncio.Task[None] | None = None
        self.cache = (
            QueryCache(settings.query_cache_size, hits=metrics.cache_hits, misses=metrics.cache_misses)
            if settings.query_cache_size
            else None
        )

    # -- reading ------------------------------------------------------------------------------------
    def require(self) -> LiveBundle:
        live = self.live
        if live is None:
            raise NoLiveBundleError(f"no bundle is live: {self.not_live_reason()}")
        return live

    def not_live_reason(self) -> str:
        if self.last_failure is not None:
            return f"loading bundle {self.last_failure.version} failed: {self.last_failure.error}"
        return f"nothing is published in {self.settings.bundles_dir} yet (no CURRENT file)"

    def current_on_disk(self) -> str | None:
        try:
            return self.store.current_version()
        except InfonceSearchError as exc:
            logger.warning("cannot read CURRENT in %s: %s", self.settings.bundles_dir, exc)
            return None

    # -- loading ------------------------------------------------------------------------------------
    def _open(self, version: str) -> LiveBundle:
        """Blocking: load + validate + pick the query encoder + canary. Raises on any problem."""
        started = time.perf_counter()
        bundle = load_bundle(self.store.version_path(version))
        if bundle.version != version:
            raise BundleInvalid(f"{bundle.path}: manifest says version {bundle.version}, folder is {version}")
        live = open_live_bundle(
            bundle,
            self.settings.encoder_backend,
            threads=self.settings.encoder_threads,
            max_ndcg_loss=self.settings.max_ndcg_loss,
            encode_batch_size=self.settings.encode_batch_size,
            cache=self.cache,
            canary_query=self.settings.canary_query,
        )
        problems = live.consistency_problems()
        if problems:
            raise BundleInvalid(f"{bundle.path}: " + "; ".join(problems))
        canary = live.run(SearchSpec(texts=[self.settings.canary_query], vectors=None, k=1))
        if not canary.hits[0]:
            raise BundleInvalid(f"{bundle.path}: the canary query returned no results")
        logger.info(
            "bundle %s ready in %.2f s (%d vectors, %s, query encoder %s)",
            version,
            time.perf_counter() - started,
            live.n_vectors,
            bundle.manifest.index.factory,
            live.backend,
        )
        return live

    async def _load_locked(self, version: str, *, follow_current: bool) -> LiveBundle | None:
        """Load `version` off the event loop and swap it in; on failure keep the old one and raise.

        Caller holds `self._lock`. With `follow_current` (the poller), the swap happens only if CURRENT
        still names `version` once it is loaded: a load that CURRENT moved away from meanwhile (a rollback
        by another process) must not swap a stale version back in; the next poll follows CURRENT.
        """
        if self.live is not None and self.live.version == version:
            return self.live
        try:
            live = await asyncio.to_thread(self._open, version)
        except Exception as exc:
            self._failed.add(version)
            self.last_failure = LoadFailure(version=version, error=str(exc), at=datetime.now(UTC).isoformat())
            self.metrics.reloads.labels(outcome="failed").inc()
            kept = self.live.version if self.live else "nothing"
            logger.error("loading bundle %s failed, still serving %s: %s", version, kept, exc)
            raise
        if follow_current:
            current = await asyncio.to_thread(self.current_on_disk)
            if current != version:
                logger.info("CURRENT moved to %s while %s was loading: not swapping it in", current, version)
                return self.live
        previous, self.live = self.live, live  # the swap: one reference
        self._failed.discard(version)
        self.metrics.reloads.labels(outcome="ok").inc()
        m = live.bundle.manifest
        self.metrics.set_live(
            version,
            n_vectors=live.n_vectors,
            recall=m.index.recall_at_10,
            backend=live.backend,
            metric=m.metric.similarity,
        )
        logger.info("now serving bundle %s (was %s)", version, previous.version if previous else "nothing")
        return live

    async def sync(self) -> None:
        """Follow CURRENT: load it if it names a version we do not serve and that has not failed already."""
        async with self._lock:
            current = await asyncio.to_thread(self.current_on_disk)
            if (
                current is None
                or (self.live is not None and self.live.version == current)
                or current in self._failed
            ):
                return
            with contextlib.suppress(Exception):  # already logged and recorded by _load_locked()
                await self._load_locked(current, follow_current=True)

    async def activate(self, version: str) -> LiveBundle:
        """Validate `version` by loading it, then point CURRENT at it. A bad version never becomes CURRENT.

        Load, swap and the CURRENT write happen under one lock, so the poller can never read the old
        CURRENT in between and swap the previous version back in.
        """
        self.store.version_path(version)  # BundleNotFound (404) for an unknown or malformed id
        self._failed.discard(version)
        async with self._lock:
            live = await self._load_locked(version, follow_current=False)
            await asyncio.to_thread(self.store.activate, version)
        if live is None:  # unreachable: without follow_current a load either swaps in or raises
            raise BundleInvalid(f"bundle {version} could not be made live")
        return live

    # -- background polling -------------------------------------------------------------------------
    async def start(self) -> None:
        await self.sync()
        if self.settings.reload_poll_seconds > 0:
            self._poller = asyncio.create_task(self._poll(), name="bundle-poller")

    async def stop(self) -> None:
        if self._poller is not None:
            self._poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._poller

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(self.settings.reload_poll_seconds)
            try:
                await self.sync()
            except Exception:  # the poller must survive anything; the next tick tries again
                logger.exception("bundle poll failed")

    # -- description --------------------------------------------------------------------------------
    async def describe(self) -> BundlesResponse:
        return await asyncio.to_thread(self._describe)

    def _describe(self) -> BundlesResponse:
        current = self.current_on_disk()
        live = self.live
        entries = [
            BundleEntry(
                version=info.version,
                live=live is not None and live.version == info.version,
                current=info.version == current,
                created_at=info.created_at.isoformat(),
                metrics=info.metrics,
                gate=info.gate.model_dump(mode="json") if info.gate else None,
            )
            for info in self.store.list_versions()
        ]
        return BundlesResponse(
            live=live.version if live else None,
            current=current,
            encoder_backend=live.backend if live else None,
            encoder_choice=live.choice if live else None,
            versions=entries,
            gate_decisions=self._gate_log(),
            last_failed_load=self.last_failure,
        )

    def _gate_log(self) -> list[dict[str, Any]]:
        path = self.store.root / GATE_LOG
        if not path.is_file():
            return []
        records = []
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:  # a torn last line from a crash: skip it, say so
                logger.warning("%s:%d: not JSON, skipped", path, number)
        return records
