"""One server process under load, its CPU by thread: which thread is the ceiling of one process.

    .venv/bin/python -m bench thread_cpu [--bundles var/bundles] [--encoder onnx-int8] [--clients 1,8,32]
        [--seconds 10] [--spin default|always|off]

Issue 42 item 5 asks why one process (`uvicorn --factory app.main:create_app`, as a user starts it) serves
fewer requests at 32 clients than two. This bench starts that one process (micro-batching on, query cache
off, the library's thread counts), drives it with wrk at each --clients level for --seconds, and reads every
thread's utime + stime from /proc/PID/task/*/stat before and after. Threads are named by `py-spy dump`
(the dev extra's py-spy; needs ptrace): `MainThread` runs the event loop (HTTP parsing, validation, routing,
serialisation: Python, under the GIL), `inference_0` the engine (app/engine/batching.py: encode, FAISS,
BM25, fusion), `asyncio_N` short hand-offs (asyncio.to_thread); threads with no Python frames are the
native pools (onnxruntime's intra-op threads, OpenMP's), which run without the GIL.

Printed per level: req/s and latency, the process's cores in use, and each thread's share of one core and
CPU ms per request. A thread at ~1.0 core is the ceiling: more clients cannot make it go faster. wrk (C,
one thread) shares the cores with the server, as in bench/serving/load_bench.py.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from bench.harness.paths import REPO
from bench.harness.ports import free_port
from bench.harness.profiling import live_timing_queries, py_spy, stat_cpu_s
from bench.harness.servers import APP, service_env, start_server, stop_server, uvicorn_cmd
from bench.harness.wrk import drive_wrk, write_wrk_bodies

NATIVE = "native pools (no Python frames)"
SPIN_TARGETS = {
    "default": APP,
    "off": "bench.harness.no_spin:create_app",
    "always": "bench.harness.no_spin:create_app_always",
}
THREAD_LINE = re.compile(r'^Thread (\d+) \([^)]*\): "([^"]*)"', re.MULTILINE)


def thread_cpu(pid: int) -> dict[int, float]:
    """{tid: CPU seconds (utime + stime)} of every live thread of `pid`."""
    out: dict[int, float] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            out[int(task.name)] = stat_cpu_s(task / "stat")
        except OSError:  # the thread ended meanwhile
            continue
    return out


def python_thread_names(pid: int) -> dict[int, str]:
    """{tid: Python thread name} from `py-spy dump`; threads it does not list run no Python."""
    exe = py_spy()
    if exe is None:
        raise SystemExit("py-spy is not installed (the dev extra: make install-dev): it names the threads")
    dump = subprocess.run([str(exe), "dump", "--pid", str(pid)], capture_output=True, text=True, check=True)
    return {int(tid): name for tid, name in THREAD_LINE.findall(dump.stdout)}


def group(tid: int, pid: int, names: dict[int, str]) -> str:
    """The row a thread is counted in: its Python name (digits of a pool's numbering dropped), or NATIVE."""
    if tid == pid:
        return "MainThread (event loop)"
    name = names.get(tid)
    if name is None:
        return NATIVE
    return re.sub(r"_\d+$", "_N", name)


def cell(pid: int, url: str, bodies: Path, clients: int, seconds: float) -> dict:
    """wrk at `clients` for `seconds`, with the CPU each thread group used meanwhile."""
    before, t0 = thread_cpu(pid), time.perf_counter()
    load = drive_wrk(url, bodies, clients, seconds, max_requests=10**9)
    after, wall = thread_cpu(pid), time.perf_counter() - t0
    names = python_thread_names(pid)
    groups: dict[str, list[float]] = {}
    for tid, cpu in after.items():
        used = cpu - before.get(tid, 0.0)
        groups.setdefault(group(tid, pid, names), []).append(used)
    return {"clients": clients, "wall": wall, "load": load, "groups": groups}


def report(row: dict) -> None:
    load, wall = row["load"], row["wall"]
    n = max(1, load["n"])
    total = sum(sum(v) for v in row["groups"].values())
    print(
        f"\n{row['clients']} client(s): {load['qps']:.0f} req/s, p50 {load['p50_ms']:.1f} ms, "
        f"p99 {load['p99_ms']:.1f} ms, {load['errors']} errors; the process used {total / wall:.2f} cores"
    )
    print(f"  {'thread':36s} {'threads':>7s} {'cores':>6s} {'ms CPU/request':>15s}")
    for name, used in sorted(row["groups"].items(), key=lambda kv: -sum(kv[1])):
        busy = sum(used)
        if busy < 0.005 * wall:
            continue
        print(f"  {name:36s} {len(used):7d} {busy / wall:6.2f} {busy * 1000 / n:15.3f}")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bundles", type=Path, default=REPO / "var" / "bundles")
    ap.add_argument("--encoder", default="onnx-int8")
    ap.add_argument("--clients", default="1,8,32")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument(
        "--spin",
        choices=sorted(SPIN_TARGETS),
        default="default",
        help="onnxruntime's spin-wait: the default (on while a run is in flight), off, or always "
        "(between runs too); bench/harness/no_spin.py",
    )
    args = ap.parse_args(argv)
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not installed (apt-get install wrk): this bench drives the server with it")
    queries = live_timing_queries(args.bundles)
    bodies = write_wrk_bodies(queries or ["a query"], name="thread_cpu_bodies.jsonl")
    port = free_port()
    env = service_env(args.bundles, args.encoder, True, SEARCH_QUERY_CACHE_SIZE="0")
    log = Path(tempfile.mkdtemp()) / "server.log"
    target = SPIN_TARGETS[args.spin]
    proc = start_server(uvicorn_cmd(target, port), env, port, log=log)
    url = f"http://127.0.0.1:{port}/search"
    print(
        f"{args.bundles}: one process, encoder {args.encoder}{f' (spin-wait {args.spin})' if args.spin != 'default' else ''}, "
        f"{os.cpu_count()} cores, wrk {args.seconds:g} s a level"
    )
    try:
        drive_wrk(url, bodies, 4, 2, max_requests=10**9)  # warm-up: pools started, first batches run
        for clients in (int(c) for c in args.clients.split(",")):
            report(cell(proc.pid, url, bodies, clients, args.seconds))
    finally:
        stop_server(proc)
    print(f"\nload average at the end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
