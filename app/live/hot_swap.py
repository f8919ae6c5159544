"""HotSwap: which bundle this process serves, and hot swapping it.

Starlette hands every request a shallow copy of the lifespan state, so the state holds this object
and a swap rebinds `hot_swap.live` — one reference assignment. A request reads `hot_swap.live` once at
its start and keeps that `LiveBundle` to the end, so a swap mid-request never mixes versions and the
old bundle lives until its last request finishes (garbage collection frees it).

Loading (read + checksum + validate + load the encoder + canary query) runs in a worker thread, off the
event loop. Only a bundle that passed all of it is swapped in; a failed load keeps the old bundle
serving, is logged, and shows in GET /bundles as `last_failed_load`. A version that failed is not
retried on every poll, only when CURRENT changes again or someone activates it explicitly.

GET /bundles' listing is app/live/bundle_listing.py. Several API processes may share one bundles folder: they only read it and follow CURRENT by polling
(`reload_poll_seconds`); POST /bundles/{v}/activate rewrites CURRENT (atomically, via BundleFolder).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial
from pathlib import Path

from app.engine.live_bundle import EncoderOptions, LiveBundle, open_live_bundle
from app.engine.query_cache import QueryCache
from app.engine.search_spec import SearchSpec
from app.live.mutation_applier import MutationApplier
from app.metrics import AppMetrics
from app.schemas.bundles import LoadFailure
from app.settings import Settings
from contract.bundles.bundle import load_bundle
from contract.bundles.folder import CURRENT_FILE, BundleFolder
from contract.errors import BundleInvalid, InfonceSearchError, ModelLoadError, NoLiveBundle
from contract.index.backend import BackendConfig
from contract.index.docstore import INCLUDE_FIELDS
from contract.index.vector_index import VectorIndex
from contract.milvus.pointer import MilvusPointer

logger = logging.getLogger(__name__)


def index_pointer(settings: Settings) -> MilvusPointer | None:
    """The Milvus hook of the bundles folder (opens collections, flips the alias on activation)."""
    if settings.index_backend != "milvus":
        return None
    return MilvusPointer(
        BackendConfig(
            backend="milvus",
            milvus_uri=settings.milvus_uri,
            milvus_token=settings.milvus_token,
            milvus_name=settings.milvus_name,
            timeout_s=settings.milvus_timeout_s,
        )
    )


class HotSwap:
    """Which bundle this process serves: loads it, swaps it in, follows CURRENT, activates."""

    def __init__(self, settings: Settings, metrics: AppMetrics, on_change: Callable[[], None] | None = None):
        self.settings = settings
        self.metrics = metrics
        self.on_change = on_change  # called on the event loop after each swap (app/live/heap_freeze.py)
        self.folder = BundleFolder(settings.bundles_dir, pointer=index_pointer(settings))
        if isinstance(self.folder.pointer, MilvusPointer):  # readiness re-points an alias that lags CURRENT
            self.folder.pointer.current_version = self.folder.current_version
        self.live: LiveBundle | None = None
        self.last_failure: LoadFailure | None = None
        self._failed: set[str] = set()
        self._poll_failed = False  # last_failure came from following CURRENT (cleared when it serves again)
        self._gone: str | None = None  # live version whose folder vanished, once reported
        self._pointer_error: str | None = None  # the last CURRENT problem logged (log once per change)
        self.fallback_from: str | None = None  # CURRENT's version that failed at startup, while serving older
        self._lock = asyncio.Lock()  # one load at a time
        self._poller: asyncio.Task[None] | None = None
        self._scrubber: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None  # where damage reported by threads is handled
        self._recovery: asyncio.Task[None] | None = None
        self.mutations = MutationApplier(
            settings, metrics, self
        )  # documents changed since a bundle was built
        self.cache = (
            QueryCache(settings.query_cache_size, hits=metrics.cache_hits, misses=metrics.cache_misses)
            if settings.query_cache_size
            else None
        )

    # -- reading ------------------------------------------------------------------------------------
    def require(self) -> LiveBundle:
        live = self.live
        if live is None:
            raise NoLiveBundle(f"no bundle is live: {self.not_live_reason()}")
        return live

    def not_live_reason(self) -> str:
        if self.last_failure is not None:
            return f"loading bundle {self.last_failure.version} failed: {self.last_failure.error}"
        return "nothing is published in the bundles folder yet (no CURRENT file)"

    def current_on_disk(self) -> str | None:
        """CURRENT's version; an unreadable CURRENT is a failed load (logged once, shown in /bundles)."""
        try:
            version = self.folder.current_version()
        except InfonceSearchError as exc:
            if str(exc) != self._pointer_error:
                self._pointer_error = str(exc)
                self._record_failure("CURRENT", str(exc))
            return None
        self._pointer_error = None
        return version

    def relative(self, text: str) -> str:
        """/bundles is public: paths in error messages are shown relative to the bundles folder."""
        root = self.settings.bundles_dir
        for form in sorted({str(root.resolve()), str(root.absolute())}, key=len, reverse=True):
            text = text.replace(form + os.sep, "")
        return text

    def _record_failure(self, version: str, error: str) -> None:
        error = self.relative(error)
        self.last_failure = LoadFailure(version=version, error=error, at=datetime.now(UTC).isoformat())
        self.metrics.reloads.labels(outcome="failed").inc()
        kept = self.live.version if self.live else "nothing"
        logger.error("loading bundle %s failed, still serving %s: %s", version, kept, error)

    # -- loading ------------------------------------------------------------------------------------
    def _open(self, version: str) -> LiveBundle:
        """Blocking: load + validate + pick the query encoder + canary. Raises on any problem."""
        started = time.perf_counter()
        # read into memory, never memory-mapped: a live file truncated under a map turns the next search
        # into SIGBUS, which kills the process with nothing logged (issue 43); read, any damage to the file
        # is only damage to report (LiveBundle.damage_problems, the scrub) while this copy keeps serving
        bundle = load_bundle(
            self.folder.version_path(version), mmap=False, index_opener=self.folder.index_opener()
        )
        if bundle.version != version:
            raise BundleInvalid(f"{bundle.path}: manifest says version {bundle.version}, folder is {version}")
        if self.settings.index_half_scan and isinstance(bundle.index, VectorIndex):
            bundle.index.keep_half_copy()  # exact answers from half the bytes (contract/index/half_scan.py)
        live = open_live_bundle(
            bundle, self.settings.encoder_backend, EncoderOptions.of(self.settings), cache=self.cache
        )
        self.mutations.replay(live)  # documents upserted / deleted after the bundle was built
        problems = live.consistency_problems()
        if problems:
            raise BundleInvalid(f"{bundle.path}: " + "; ".join(problems))
        # the canary reads every part a request can: encoder, index, overlay and the document store
        canary = live.answer(
            SearchSpec(texts=[self.settings.canary_query], vectors=None, top_k=1, include=INCLUDE_FIELDS)
        )
        if not canary.hits[0]:
            raise BundleInvalid(f"{bundle.path}: the canary query returned no results")
        damage = live.damage_problems()
        if damage:
            raise BundleInvalid(f"{bundle.path}: " + "; ".join(damage))
        live.on_damage = partial(self._damage_reported, version)  # from now on: serving
        logger.info(
            "bundle %s ready in %.2f s (%d vectors, %s, query encoder %s)",
            version,
            time.perf_counter() - started,
            live.n_vectors,
            bundle.manifest.index.factory,
            live.encoder_backend,
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
            self._record_failure(version, str(exc))
            raise
        if follow_current:
            current = await asyncio.to_thread(self.current_on_disk)
            if current != version:
                logger.info("CURRENT moved to %s while %s was loading: not swapping it in", current, version)
                return self.live
        previous = await self.mutations.swap_in(live)  # the swap: one reference, log applied
        if self.on_change is not None:
            self.on_change()
        self._failed.discard(version)
        if follow_current or version == await asyncio.to_thread(self.current_on_disk):
            # serving what CURRENT names again: the system recovered, an old failure is history
            self.last_failure = None
            self.fallback_from = None
            self.metrics.fallback.set(0)
        self.metrics.reloads.labels(outcome="ok").inc()
        m = live.bundle.manifest
        self.metrics.set_live(
            version,
            n_vectors=live.n_vectors,
            recall=m.index.recall_at_10,
            encoder_backend=live.encoder_backend,
            metric=m.metric.similarity,
        )
        logger.info("now serving bundle %s (was %s)", version, previous.version if previous else "nothing")
        return live

    async def sync(self) -> None:
        """Follow CURRENT: load it if it names a version we do not serve and that has not failed already."""
        async with self._lock:
            live = self.live
            if (
                live is not None
                and live.version != self._gone
                and not await asyncio.to_thread(Path(live.bundle.path).is_dir)
            ):
                self._gone = live.version  # report once; /readyz says not ready while it lasts
                self._record_failure(
                    live.version, "its folder was deleted while serving (still served from memory)"
                )
            current = await asyncio.to_thread(self.current_on_disk)
            if current is None and self._pointer_error is not None:
                self._poll_failed = True
            serving_current = self.live is not None and self.live.version == current
            if (
                serving_current
                and self._poll_failed
                and self.live is not None
                and self.live.version != self._gone
            ):
                # CURRENT names what serves again (repaired, or moved back): the poll's failure is history
                logger.info("CURRENT names %s again, which serves: clearing the last failed load", current)
                self.last_failure, self._poll_failed = None, False
            if current is None or serving_current or current in self._failed:
                return
            try:
                await self._load_locked(current, follow_current=True)
            except Exception:  # already logged and recorded by _load_locked()
                self._poll_failed = True

    async def activate(self, version: str) -> LiveBundle:
        """Validate `version` by loading it (once), then point CURRENT at it. A bad version never becomes CURRENT.

        Load, swap and the CURRENT write happen under one lock, so the poller can never read the old
        CURRENT in between and swap the previous version back in.
        """
        self.folder.version_path(version)  # BundleNotFound (404) for an unknown or malformed id
        live = self.live
        already = live is not None and live.version == version and live.version != self._gone
        if already and await asyncio.to_thread(self.current_on_disk) == version:
            assert live is not None
            return live  # already live and CURRENT: nothing to load, nothing to re-hash
        self._failed.discard(version)
        async with self._lock:
            try:
                live = await self._load_locked(version, follow_current=False)
                # the load above loaded the model; the folder's activation only validates (never loads it)
                await asyncio.to_thread(self.folder.activate, version)
            except (BundleInvalid, ModelLoadError) as exc:  # the 409 names files relative to the folder
                raise type(exc)(self.relative(str(exc))) from None
            self.last_failure, self.fallback_from = None, None  # CURRENT names what serves again
            self.metrics.fallback.set(0)
        if live is None:  # unreachable: without follow_current a load either swaps in or raises
            raise BundleInvalid(f"bundle {version} could not be made live")
        return live

    # -- background polling -------------------------------------------------------------------------
    async def fallback(self, avoid: frozenset[tuple[int, int]] = frozenset()) -> None:
        """At startup, when CURRENT's version does not load: serve the newest version that does.

        CURRENT is left as it is (APIs only read the bundles folder); /bundles shows `fallback_from` and
        the metric search_bundle_fallback is 1 until CURRENT names a version that loads. `avoid`: the
        (device, inode) of damaged files; a version holding one of them (a hard link: a query-side
        version shares its parent's index.faiss and docs.sqlite) is skipped without loading it.
        """
        current = await asyncio.to_thread(self.current_on_disk)
        failure = self.last_failure
        infos = await asyncio.to_thread(self.folder.list_versions)
        for info in sorted(infos, key=lambda i: i.version, reverse=True):
            if info.version == current or info.version in self._failed:
                continue
            if self.live is not None and self.live.version == info.version:
                continue
            if await asyncio.to_thread(self._shares_damage, info.version, avoid):
                continue
            async with self._lock:
                try:
                    await self._load_locked(info.version, follow_current=False)
                except Exception:  # recorded by _load_locked; try the next older one
                    continue
            self.fallback_from = current or "CURRENT"
            self.last_failure = failure  # why we fell back stays visible
            self.metrics.fallback.set(1)
            logger.warning(
                "CURRENT (%s) does not load: serving %s, the newest version that does", current, info.version
            )
            return

    def _shares_damage(self, version: str, avoid: frozenset[tuple[int, int]]) -> bool:
        """Whether a file of `version` is one of the damaged inodes (blocking: a stat per file)."""
        if not avoid:
            return False
        root = self.folder.root / version
        for folder, _, names in os.walk(root):
            for name in names:
                try:
                    st = os.stat(os.path.join(folder, name), follow_symlinks=False)
                except OSError:
                    continue
                if (st.st_dev, st.st_ino) in avoid:
                    rel = os.path.relpath(os.path.join(folder, name), root)
                    logger.warning(
                        "not falling back to %s: its %s is the damaged file (a hard link)", version, rel
                    )
                    return True
        return False

    # -- damage while serving ------------------------------------------------------------------------
    def _damage_reported(self, version: str, message: str) -> None:
        """A part of the live `version` failed (any thread): stop serving it, fall back (on the loop)."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._start_recovery, version, message)

    def _start_recovery(self, version: str, message: str) -> None:
        if self._recovery is None or self._recovery.done():
            self._recovery = asyncio.create_task(self._recover(version, message), name="bundle-recovery")

    async def _recover(self, version: str, message: str) -> None:
        """Like a CURRENT that does not load: the damaged version is failed (not retried until CURRENT
        changes or it is activated) and the newest version that loads serves; /readyz is 503 meanwhile
        (LiveBundle.damage), and stays so if no other version loads."""
        async with self._lock:
            live = self.live
            if live is None or live.version != version:
                return
            self._failed.add(version)
            self._record_failure(version, f"damaged while serving: {message}")
        avoid = await asyncio.to_thread(damaged_inodes, Path(live.bundle.path), live.damaged_files)
        try:
            await self.fallback(avoid)
        except Exception:  # logged; readiness keeps saying why
            logger.exception("falling back from damaged bundle %s failed", version)

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        await self.sync()
        if self.live is None and self.last_failure is None and await asyncio.to_thread(self._orphaned):
            # versions but no CURRENT (deleted, or lost with its folder's metadata): as a garbage CURRENT
            self._record_failure("CURRENT", "CURRENT is missing although versions are published")
        if self.live is None and self.last_failure is not None:
            await self.fallback()
        if self.settings.reload_poll_seconds > 0:
            self._poller = asyncio.create_task(self._poll(), name="bundle-poller")
        if self.settings.scrub_interval_s > 0:
            self._scrubber = asyncio.create_task(self._scrub(), name="bundle-scrub")

    def _orphaned(self) -> bool:
        return not (self.folder.root / CURRENT_FILE).exists() and bool(self.folder.list_versions())

    async def stop(self) -> None:
        for task in (self._poller, self._scrubber, self._recovery):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(self.settings.reload_poll_seconds)
            try:
                await self.sync()
                await self.mutations.catch_up()  # what other replicas wrote to the log
            except Exception:  # the poller must survive anything; the next tick tries again
                logger.exception("bundle poll failed")

    async def _scrub(self) -> None:
        """Every `scrub_interval_s`: hash the live bundle's files against its manifest (LiveBundle.scrub).

        In a worker thread and without the load lock: hashing a large index takes seconds
        (bench/index/scrub_bench.py), and loads, activations and the poller must not wait for it. The
        bundle hashed is the one live when the round began; damage found goes the way of any other
        (LiveBundle.report_damage -> not ready -> fall back)."""
        while True:
            await asyncio.sleep(self.settings.scrub_interval_s)
            live = self.live
            if live is None:
                continue
            try:
                started = time.perf_counter()
                bad = await asyncio.to_thread(live.scrub)
                logger.debug(
                    "scrubbed %s in %.2f s: %d damaged", live.version, time.perf_counter() - started, len(bad)
                )
            except Exception:  # the scrubber must survive anything; the next round tries again
                logger.exception("bundle scrub failed")


def damaged_inodes(folder: Path, files: tuple[str, ...]) -> frozenset[tuple[int, int]]:
    """(device, inode) of each damaged file still on disk: what a fallback must not share (blocking)."""
    out = set()
    for rel in files:
        with contextlib.suppress(OSError):  # gone: nothing can share it
            st = os.stat(folder / rel)
            out.add((st.st_dev, st.st_ino))
    return frozenset(out)
