"""Which collections this process serves: each one a bundles folder with its own HotSwap (and so its own
MutationApplier, query cache and CURRENT poller), loaded on first use and evicted under a budget.

A `Collection` wraps the per-bundle machinery unchanged: the HotSwap is built from the app's Settings
with `bundles_dir` (and the Milvus names) of that collection (`Settings.for_collection`) and an
`AppMetrics.for_collection()` of its own, whose series the app's /metrics re-exports with a `collection`
label while it is loaded. Routes find the collection through a dependency (app/api/collection_routes.py)
and then run exactly the code the old routes run.

- `default` (SEARCH_BUNDLES_DIR) is loaded at startup, as before collections, and never evicted.
- Any other collection loads when a request names it (its CURRENT, with the HotSwap's fallback rules);
  concurrent first requests share one load. The request that loaded it learns how long that took.
- After each load, and on each tick of the idle sweep, collections are evicted least recently used first
  while more than SEARCH_MAX_LOADED_COLLECTIONS are loaded besides `default`, or while what is loaded
  weighs more than SEARCH_MAX_LOADED_BYTES. A collection with requests in flight is never evicted (they
  finish on what they hold); one idle for SEARCH_COLLECTION_IDLE_SECONDS is evicted too.
- Weight is measured from what a loaded bundle holds in memory: its FAISS index file, its BM25 arrays,
  and its encoders' weight files, each distinct encoder counted once (bundles with the same model files
  share one loaded copy: contract/encoding/shared_models.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from app.live.heap_freeze import HeapFreezer
from app.live.hot_swap import HotSwap, index_pointer
from app.metrics import AppMetrics
from app.settings import Settings
from contract.bundles.bundle import INDEX_FILE, LEXICAL_DIR, MODEL_DIR, VERSION_RE, read_manifest
from contract.bundles.collections import DEFAULT_COLLECTION, Collections, collection_milvus_name
from contract.bundles.folder import CURRENT_FILE, read_current
from contract.encoding import spare_cores
from contract.encoding.shared_models import files_key
from contract.errors import CollectionNotFound, InfonceSearchError
from contract.index.backend import MILVUS_EXTRAS, is_milvus
from contract.index.half_scan import kept_by
from contract.milvus.index import alias_name
from contract.milvus.pointer import drop_alias, point_alias

logger = logging.getLogger(__name__)

OTHER_LABEL = "_other"  # the `collection` label of requests past SEARCH_METRICS_MAX_COLLECTIONS names


@dataclass
class Collection:
    """One served collection: its name, its settings (its bundles folder) and its HotSwap."""

    name: str
    settings: Settings
    metrics: AppMetrics
    hot_swap: HotSwap
    load_seconds: float = 0.0
    loaded_at: float = field(default_factory=time.time)
    last_used: float = field(default_factory=time.monotonic)
    in_flight: int = 0

    @property
    def folder(self) -> Path:
        return self.settings.bundles_dir

    def resident(self) -> dict[str, int]:
        """{part: bytes} of what the live bundle holds in memory; shared parts are keyed by content, so
        summing the union over collections counts a shared encoder once."""
        live = self.hot_swap.live
        if live is None:
            return {}
        folder, files = Path(live.bundle.path), live.bundle.manifest.files
        parts = {
            f"index:{folder}": _size(folder / INDEX_FILE)
            + _size(folder / LEXICAL_DIR)
            + _half_bytes(live.bundle.index)
        }
        weights = [f for f in (folder / MODEL_DIR).rglob("*.safetensors")] + list(
            (folder / MODEL_DIR).rglob("pytorch_model.bin")
        )
        key = files_key(files, MODEL_DIR + "/", skip=("onnx",)) or str(folder)
        parts[f"encoder:{key}"] = sum(_size(f) for f in weights)
        backend = live.encoder_backend
        if backend in ("onnx", "onnx-int8"):
            onnx = "model_int8.onnx" if backend == "onnx-int8" else "model.onnx"
            # the spare-core session (contract/encoding/spare_cores.py) holds the model once more
            copies = 2 if spare_cores.usage(live.query_encoder)["threads"] else 1
            parts[f"{backend}:{files_key(files, MODEL_DIR + '/') or folder}"] = copies * _size(
                folder / MODEL_DIR / "onnx" / onnx
            )
        elif backend in ("distilled", "static"):
            sub = f"query_encoders/{backend}"
            parts[f"{backend}:{files_key(files, sub + '/') or folder}"] = _size(folder / sub)
        return parts


def _half_bytes(index: Any) -> int:
    """The index's fp16 copy, kept beside it (SEARCH_INDEX_HALF_SCAN)."""
    half = kept_by(index)
    return half.usage()["bytes"] if half else 0


def _size(path: Path) -> int:
    """Bytes of a file, or of every file under a folder; 0 when absent."""
    try:
        if path.is_dir():
            return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
        return path.stat().st_size
    except OSError:
        return 0


class CollectionRegistry:
    """The collections this process serves (see the module docstring)."""

    def __init__(self, settings: Settings, metrics: AppMetrics):
        self.settings = settings
        self.metrics = metrics
        self.collections: Collections = settings.collections()
        self.loaded: dict[str, Collection] = {}
        self._loading: dict[str, asyncio.Task[Collection]] = {}
        self._labels: set[str] = set()  # collection names with a request label of their own
        self._sweeper: asyncio.Task[None] | None = None
        self._aliases_task: asyncio.Task[None] | None = None
        self.heap = HeapFreezer(settings.gc_freeze_settle_s)
        self._registry_metrics(metrics.registry)
        if metrics.collections is not None:
            metrics.collections.sources = lambda: [
                (name, c.metrics.registry) for name, c in list(self.loaded.items())
            ]

    def _registry_metrics(self, r: CollectorRegistry) -> None:
        self.loaded_gauge = Gauge(
            "search_collections_loaded", "Collections loaded in this process (default included).", registry=r
        )
        self.bytes_gauge = Gauge(
            "search_collections_resident_bytes",
            "Bytes the loaded collections hold (index, BM25 and encoder files; a shared encoder once).",
            registry=r,
        )
        self.load_seconds = Histogram(
            "search_collection_load_duration_seconds",
            "Time to load a collection on first use (its live bundle, encoder choice and canary).",
            buckets=(0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0),
            registry=r,
        )
        self.evictions = Counter(
            "search_collection_evictions",
            "Collections unloaded, by reason (budget, idle, deleted).",
            ["reason"],
            registry=r,
        )

    # -- lifecycle --------------------------------------------------------------------------------------
    async def start(self) -> Collection:
        """Load `default` (as the app did before collections) and start the idle sweep."""
        await asyncio.to_thread(self.collections.purge_stale)
        default = await self._load(DEFAULT_COLLECTION)
        self.heap.freeze_now()  # nothing on its way out yet: no need to wait
        idle = self.settings.collection_idle_seconds
        if idle > 0:
            self._sweeper = asyncio.create_task(self._sweep(idle), name="collections-idle-sweep")
        if self.settings.index_backend == "milvus" and self.settings.reload_poll_seconds > 0:
            self._aliases_task = asyncio.create_task(self._follow_aliases(), name="milvus-aliases")
        return default

    async def _follow_aliases(self) -> None:
        """Keep our aliases' Milvus aliases on their collections' CURRENT versions (every poll interval)."""
        while True:
            try:
                await asyncio.to_thread(self.sync_milvus_aliases)
            except Exception:  # the task must survive anything; the next tick tries again
                logger.exception("following the aliases in Milvus failed")
            await asyncio.sleep(self.settings.reload_poll_seconds)

    async def stop(self) -> None:
        for background in (self._sweeper, self._aliases_task):
            if background is not None:
                background.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await background
        for loading in list(self._loading.values()):
            loading.cancel()
        for c in list(self.loaded.values()):
            await c.hot_swap.stop()
        self.loaded.clear()
        await self.heap.stop()

    @property
    def default(self) -> Collection:
        return self.loaded[DEFAULT_COLLECTION]

    # -- getting one ------------------------------------------------------------------------------------
    def resolve(self, name: str) -> tuple[str, str | None]:
        """(collection, alias it was reached through) — CollectionRefused / CollectionNotFound otherwise."""
        return self.collections.resolve(name)

    async def get(self, name: str) -> tuple[Collection, float | None]:
        """The loaded collection `name` (resolved already), loading it first if need be; the second value
        is the load time in seconds when this call waited for a load, else None."""
        found = self.loaded.get(name)
        if found is not None:
            found.last_used = time.monotonic()
            return found, None
        task = self._loading.get(name)
        if task is None:
            task = asyncio.create_task(self._load(name), name=f"load-collection-{name}")
            self._loading[name] = task
            task.add_done_callback(lambda _: self._loading.pop(name, None))
        started = time.perf_counter()
        collection = await asyncio.shield(task)
        collection.last_used = time.monotonic()
        return collection, time.perf_counter() - started

    async def _load(self, name: str) -> Collection:
        if not await asyncio.to_thread(self.collections.exists, name):
            raise CollectionNotFound(f"no collection named {name!r}")
        settings = self.settings.for_collection(name)
        metrics = AppMetrics.for_collection()
        hot_swap = HotSwap(settings, metrics, on_change=self.heap.changed)
        started = time.perf_counter()
        await hot_swap.start()  # CURRENT's version (or the newest that loads), then its CURRENT poller
        seconds = time.perf_counter() - started
        collection = Collection(name, settings, metrics, hot_swap, load_seconds=seconds)
        self.loaded[name] = collection
        self.load_seconds.observe(seconds)
        live = hot_swap.live
        logger.info(
            "collection %s loaded in %.2f s (%s)",
            name,
            seconds,
            f"bundle {live.version}" if live else f"nothing live: {hot_swap.not_live_reason()}",
        )
        await self.enforce_budget(spare=name)
        return collection

    @contextlib.contextmanager
    def using(self, collection: Collection) -> Iterator[Collection]:
        """Mark a request in flight on `collection` (it is not evicted meanwhile)."""
        collection.in_flight += 1
        try:
            yield collection
        finally:
            collection.in_flight -= 1
            collection.last_used = time.monotonic()

    # -- the budget -------------------------------------------------------------------------------------
    def resident_bytes(self, loaded: list[Collection] | None = None) -> int:
        parts: dict[str, int] = {}
        for c in self.loaded.values() if loaded is None else loaded:
            parts |= c.resident()
        return sum(parts.values())

    async def enforce_budget(self, spare: str | None = None) -> list[str]:
        """Evict least recently used collections (never `spare`, the one just loaded) while over the count or
        byte budget; returns them."""
        evicted = []
        max_n, max_bytes = self.settings.max_loaded_collections, self.settings.max_loaded_bytes
        while True:
            named = [c for c in self.loaded.values() if c.name != DEFAULT_COLLECTION]
            total = await asyncio.to_thread(self.resident_bytes)
            over = len(named) > max_n or (max_bytes is not None and total > max_bytes)
            self._observe(total)
            if not over:
                break
            victims = sorted(
                (c for c in named if c.name != spare and c.in_flight == 0), key=lambda c: c.last_used
            )
            if not victims:
                logger.warning(
                    "collections over budget (%d loaded besides default, %d bytes) but none can be evicted "
                    "now (in use)",
                    len(named),
                    total,
                )
                break
            await self.evict(victims[0].name, reason="budget")
            evicted.append(victims[0].name)
        return evicted

    async def evict(self, name: str, *, reason: str) -> bool:
        """Unload `name` (never `default`): stop its poller and drop its bundle; requests that hold it
        finish on it, and the memory goes when they do."""
        if name == DEFAULT_COLLECTION:
            return False
        collection = self.loaded.pop(name, None)
        if collection is None:
            return False
        await collection.hot_swap.stop()
        collection.hot_swap.live = None  # the bundle is freed once in-flight requests let go of it
        self.heap.changed()
        self.evictions.labels(reason=reason).inc()
        self._observe()
        logger.info("collection %s unloaded (%s)", name, reason)
        return True

    def _observe(self, total: int | None = None) -> None:
        self.loaded_gauge.set(len(self.loaded))
        self.bytes_gauge.set(self.resident_bytes() if total is None else total)

    async def _sweep(self, idle_s: float) -> None:
        while True:
            await asyncio.sleep(min(30.0, max(1.0, idle_s / 4)))
            try:
                now = time.monotonic()
                for c in list(self.loaded.values()):
                    if c.name != DEFAULT_COLLECTION and c.in_flight == 0 and now - c.last_used >= idle_s:
                        await self.evict(c.name, reason="idle")
            except Exception:  # the sweep must survive anything; the next tick tries again
                logger.exception("collection idle sweep failed")

    # -- describing -------------------------------------------------------------------------------------
    def label(self, name: str) -> str:
        """The `collection` label of a request about `name`: bounded by SEARCH_METRICS_MAX_COLLECTIONS."""
        if name in self._labels or name == DEFAULT_COLLECTION:
            return name
        if len(self._labels) < self.settings.metrics_max_collections:
            self._labels.add(name)
            return name
        return OTHER_LABEL

    def describe(self, name: str) -> dict[str, Any]:
        """What GET /collections shows about one collection, without loading it (blocking: reads files)."""
        folder = self.collections.folder(name)
        loaded = self.loaded.get(name)
        out: dict[str, Any] = {
            "name": name,
            "default": name == DEFAULT_COLLECTION,
            "aliases": sorted(a for a, c in self.collections.aliases().items() if c == name),
            "loaded": loaded is not None,
            "current": None,
            "created_at": self.collections.meta(name).get("created_at"),
            "dataset": self.collections.meta(name).get("dataset"),
        }
        try:  # read as a version id only: this listing is public (contract.bundles.folder.read_current)
            out["current"] = read_current(folder / CURRENT_FILE)
        except InfonceSearchError:
            out["current"] = None
        if loaded is not None:
            live = loaded.hot_swap.live
            out |= {
                "live": live.version if live else None,
                "n_vectors": live.n_vectors if live else None,
                "encoder_backend": live.encoder_backend if live else None,
                "load_seconds": round(loaded.load_seconds, 3),
                "resident_bytes": sum(loaded.resident().values()),
                "in_flight": loaded.in_flight,
                "not_live_reason": None if live else loaded.hot_swap.not_live_reason(),
            }
        return out

    def readiness(self) -> dict[str, dict[str, Any]]:
        """Per collection, without loading any: loaded ones by their live bundle's consistency (the
        default's canary runs in /readyz itself), others by whether CURRENT names a version."""
        out: dict[str, dict[str, Any]] = {}
        for name in self.collections.names():
            loaded = self.loaded.get(name)
            if loaded is None:
                try:
                    current = read_current(self.collections.folder(name) / CURRENT_FILE)
                except InfonceSearchError:
                    current = None
                out[name] = {"status": "unloaded" if current else "empty", "version": current}
                continue
            live = loaded.hot_swap.live
            if live is None:
                nothing = (
                    loaded.hot_swap.last_failure is None
                )  # no CURRENT, nothing failed: not published yet
                out[name] = {
                    "status": "empty" if nothing else "not_ready",
                    "reason": loaded.hot_swap.not_live_reason(),
                }
                continue
            problems = live.consistency_problems()
            out[name] = {
                "status": "not_ready" if problems else "ready",
                "version": live.version,
                **({"reason": "; ".join(problems)} if problems else {}),
            }
        return out

    # -- Milvus (SEARCH_INDEX_BACKEND=milvus) ------------------------------------------------------------
    def _milvus(self, name: str) -> Any:
        """The MilvusPointer of collection `name` (its Milvus names), or None with the FAISS backend."""
        base = self.settings.milvus_name
        return index_pointer(
            self.settings.model_copy(update={"milvus_name": collection_milvus_name(base, name)})
        )

    def drop_milvus(self, name: str, folder: Path) -> None:
        """Drop the Milvus collections of a deleted collection's versions (read from its retired folder)
        and its live alias. Blocking."""
        pointer = self._milvus(name)
        if pointer is None:
            return
        for path in folder.iterdir():
            if path.is_dir() and VERSION_RE.match(path.name):
                try:
                    pointer.on_delete(read_manifest(path))
                except InfonceSearchError as exc:
                    logger.warning("collection %s, version %s: %s", name, path.name, exc)
        drop_alias(pointer.config, alias_name(pointer.config.milvus_name))

    def drop_milvus_alias(self, alias: str) -> None:
        """Drop the Milvus alias of a deleted alias of ours. Blocking."""
        pointer = self._milvus(alias)
        if pointer is not None:
            drop_alias(pointer.config, alias_name(pointer.config.milvus_name))

    def sync_milvus_aliases(self) -> None:
        """Point each of our aliases' Milvus alias (`<base>_<alias>_live`) at the Milvus collection of its
        target's CURRENT version, as `<base>_<collection>_live` is. Blocking; idempotent (the CURRENT poll
        of each API calls it again, so an alias follows its collection's publishes)."""
        for alias, target in self.collections.aliases().items():
            pointer = self._milvus(alias)
            if pointer is None:
                return
            try:
                folder = self.collections.folder(target)
                version = read_current(folder / CURRENT_FILE)
                manifest = read_manifest(folder / version) if version else None
            except (OSError, InfonceSearchError):
                continue
            if manifest is None or not is_milvus(manifest.index):
                continue
            collection = str(manifest.extras[MILVUS_EXTRAS]["collection"])
            try:
                point_alias(pointer.config, alias_name(pointer.config.milvus_name), collection)
            except InfonceSearchError as exc:
                logger.warning("alias %s: %s", alias, exc)
