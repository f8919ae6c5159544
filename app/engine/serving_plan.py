"""How many API processes, and how many intra-op threads each: chosen from the cores and the query encoder.

A request's cost on this service is the query encoder plus Python (HTTP parsing, validation, the answer's
JSON). One process runs Python on one core at a time, so one worker process per core, one intra-op thread
each, whatever the encoder. Each worker listens on a socket of its own (app/worker_sockets.py), so the
kernel splits the connections between them. Measured on 2 cores, 2 workers × 1 thread against one process
× 2 threads, wrk at 1, 8 and 32 clients (bench/serving/load_bench.py --workers-compare, debpkgs and pycode
bench corpora; bench/results/workers_compare_corpora.txt):

- onnx-int8 (debpkgs and pycode): 1.01× and 0.78× at 1 client, 1.59× and 1.41× at 8, 1.20× and 1.29× at 32, p99 at 32
  45 against 56 ms and 53 against 63 ms;
- torch (debpkgs): 1.02×, 1.17×, 1.40×, p99 at 32 115 against 211 ms;
- a static table (`static`, `static-routed`): a request is mostly Python; 1.38× and 1.70× at 8 and 32
  clients (scifact) even before the sockets were split.

At 1 client this plan leaves a core idle; each worker's ONNX encoder then runs on a second session of two
threads (contract/encoding/spare_cores.py: p50 0.79-0.88x at 1 client, unused at 8 and 32 clients), at the
price of the query model's memory once more per worker.

Before the sockets were split, uvicorn's one shared socket let the first worker to wake take nearly every
connection of a burst (bench/results/worker_balance.txt), and one process with threads = cores had looked
better for a transformer (1.15×, 1.31×, 1.46× at 1, 8, 32 clients). Two workers of two threads each lost at
32 clients (464 against 803 req/s, pycode, int8: four threads on two cores). On more cores than two this
is not measured: SEARCH_WORKERS and SEARCH_ENCODER_THREADS override the plan.

Which encoder `auto` will pick is read from the live bundle's manifest at start (the recorded nDCG@10
losses and routing curves against SEARCH_MAX_NDCG_LOSS), before any model loads; the workers then choose
for themselves as usual (app/engine/encoder_choice.py). A bundle published later with another encoder
keeps the process count until restart. Document writes (SEARCH_API_KEY set) keep one process: another
worker process sees a write only on its next poll of the mutation log (SEARCH_RELOAD_POLL_SECONDS), and
an acknowledged write must be found by the next search. SEARCH_WORKERS / SEARCH_ENCODER_THREADS override.

Each worker holds its own copy of the FAISS index in memory (app/live/hot_swap.py loads bundles with
mmap=False). Until issue 43 it was memory-mapped so the workers shared its pages, but a live index.faiss
truncated under the map killed the process with SIGBUS on the next search; a copy cannot fault. The price
is the index's size once per worker (a flat 1M x 384 float32 index: 1.5 GB each, n x dim x 4 bytes; not
measured here), and the query encoder's once per worker: SEARCH_WORKERS=1 where memory is short.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from app.settings import Settings
from contract.bundles.bundle import read_manifest
from contract.bundles.folder import BundleFolder
from contract.encoding.query_encoders import EXTRAS_KEY, variant_folder
from contract.encoding.routing import operating_point, routing_record
from contract.errors import InfonceSearchError

LIGHT_BACKENDS = ("static", "static-routed")  # requests that are mostly Python: one process per core
CGROUP_CPU_MAX = Path("/sys/fs/cgroup/cpu.max")


@dataclass(frozen=True)
class ServingPlan:
    workers: int
    encoder_threads: int
    cores: int
    expected_encoder: str | None  # what `auto` (or the setting) will serve, as the manifest says
    reason: str
    launcher: str = "python -m app.serve"
    index: str = "FAISS read into memory: one copy per worker (a damaged file cannot fault it)"

    def to_json(self) -> str:
        return json.dumps(asdict(self))


def available_cores(cpu_max: Path = CGROUP_CPU_MAX) -> int:
    """Cores this process may use: its CPU affinity, capped by a cgroup v2 quota (a container's --cpus)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    try:
        quota, period = cpu_max.read_text().split()[:2]
        if quota != "max":
            cores = min(cores, max(1, math.ceil(int(quota) / int(period))))
    except (OSError, ValueError):
        pass
    return max(1, cores)


def expected_encoder(settings: Settings) -> str | None:
    """The query encoder the live bundle will be served with, from its manifest (None: nothing live)."""
    if settings.encoder_backend != "auto":
        return str(settings.encoder_backend)
    try:
        folder = BundleFolder(settings.bundles_dir)
        version = folder.current_version()
        if version is None:
            return None
        path = folder.version_path(version)
        extras = read_manifest(path).extras
    except InfonceSearchError:
        return None
    variants = (extras.get(EXTRAS_KEY) or {}).get("variants") or {}
    static = variants.get("static") or {}
    if not variant_folder(path, "static").is_dir():
        return "a transformer (no static table in the bundle)"
    loss = static.get("ndcg_loss")
    if loss is not None and float(loss) <= settings.max_ndcg_loss:
        return "static"
    routing = routing_record(extras, "static")
    if settings.routing and routing is not None and operating_point(routing, settings.max_ndcg_loss):
        return "static-routed"
    return "a transformer (the static table is over the nDCG budget)"


def choose(settings: Settings, cores: int | None = None) -> ServingPlan:
    """The worker count and intra-op threads for `settings` on this machine (see the module docstring)."""
    cores = cores or available_cores()
    encoder = expected_encoder(settings)
    if settings.workers:
        workers, reason = settings.workers, "SEARCH_WORKERS"
    elif cores < 2:
        workers, reason = 1, "one core"
    elif settings.api_key:
        workers, reason = (
            1,
            "document writes are on (SEARCH_API_KEY): one process, so the next search after an "
            "acknowledged write finds it (other processes would see it on their next poll)",
        )
    elif encoder in LIGHT_BACKENDS:
        workers, reason = (
            cores,
            f"{encoder} query encoder: a request is mostly Python, so one process per core",
        )
    else:
        workers, reason = (
            cores,
            f"{encoder or 'no live bundle yet; assuming'} a transformer query encoder: one process per core, "
            "one encoder thread each, a socket each (served more than one process with every core's "
            "threads at 8 and 32 clients)",
        )
    threads = settings.encoder_threads or max(1, cores // workers)
    return ServingPlan(workers, threads, cores, encoder, reason)


def describe(
    settings: Settings, spare_cores: dict[str, Any] | None = None, half_scan: dict[str, int] | None = None
) -> dict[str, Any]:
    """What GET /bundles shows as `serving`: the launcher's plan, or what this process knows without one;
    the live encoder's `spare_cores` session (contract/encoding/spare_cores.py's usage) and the live index's
    `half_scan` copy (contract/index/half_scan.py's usage)."""
    plan: dict[str, Any] | None = None
    if settings.serving_plan:
        try:
            loaded = json.loads(settings.serving_plan)
            plan = loaded if isinstance(loaded, dict) else None
        except json.JSONDecodeError:
            pass
    if plan is None:
        plan = {
            "launcher": "not python -m app.serve: the worker count is uvicorn's own (--workers / UVICORN_WORKERS)",
            "encoder_threads": settings.encoder_threads or "library default",
            "cores": available_cores(),
        }
    return {**plan, "spare_cores": spare_cores, "half_scan": half_scan, "pid": os.getpid()}
