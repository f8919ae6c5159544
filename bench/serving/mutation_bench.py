"""Documents without a retrain: upsert throughput, time until a second replica serves a write, and the
cost of a delta on /search.

    flock "$BENCH_LOCK" .venv/bin/python -u -m bench mutation_bench [--docs 1000] [--poll 2.0] [--visible 30]

Builds (once, cached under var/bench/ by fairness_bench.bundle, git-ignored) a bundle of the first --docs scifact documents with
the base all-MiniLM-L6-v2 (torch, flat index), copies it into a fresh bundles folder, and starts two real
API processes on it (uvicorn on loopback, SEARCH_RELOAD_POLL_SECONDS=--poll, query cache off). Then:

1. /search on replica A, no delta: --searches single-query requests (scifact test queries), one after
   another; p50 end to end and p50 of the server's own search_ms;
2. upserts/s on A: --singles requests of 1 document, then --batches requests of 64 (later scifact
   abstracts, so the documents are real text); every answer means the write is durable and served by A;
3. time to visible on B: --visible times, wait a random part of the poll interval, upsert 1 document
   on A, then poll B's GET /documents/{id} every 5 ms until it answers 200 (timed from A's answer): p50 / p99 (with 30 samples p99 is close to the maximum). The poll
   interval bounds it: expect about half of it at p50;
4. /search again on A, with 1 % of the corpus replaced (delta documents + as many tombstones) on top of
   the writes above; the ratio to (1) is printed.

Client and servers share the CPU, so absolute numbers are pessimistic on 2 cores.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np

from bench.harness.paths import REPO, require_scifact
from bench.harness.ports import free_port
from bench.harness.servers import start_server
from bench.serving.fairness_bench import bundle as template

KEY = {"X-API-Key": "bench"}


def fresh_copy(src: Path, dst: Path) -> Path:
    version = (src / "CURRENT").read_text().strip()
    shutil.copytree(src / version, dst / version, copy_function=os.link)  # published files are never written
    shutil.copy(src / "CURRENT", dst / "CURRENT")
    return dst


def start(bundles: Path, poll: float, log: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = os.environ | {
        "SEARCH_BUNDLES_DIR": str(bundles),
        "SEARCH_API_KEY": "bench",
        "SEARCH_RELOAD_POLL_SECONDS": str(poll),
        "SEARCH_ENCODER_BACKEND": "torch",
        "SEARCH_QUERY_CACHE_SIZE": "0",
        "SEARCH_MAX_DOCUMENTS_BATCH": "64",
        "SEARCH_LOG_LEVEL": "WARNING",
        "PYTHONPATH": str(REPO),
    }
    cmd = [sys.executable, "-m", "uvicorn", "--factory", "app.main:create_app", "--port", str(port)]
    return start_server(cmd, env, port, "/readyz", timeout=300, log=log), f"http://127.0.0.1:{port}"


def search_p50(client: httpx.Client, url: str, queries: list[str]) -> tuple[float, float]:
    total, server = [], []
    for q in queries:
        t0 = time.perf_counter()
        r = client.post(url + "/search", json={"query": q, "top_k": 10})
        total.append((time.perf_counter() - t0) * 1000)
        r.raise_for_status()
        server.append(r.json()["timings"]["search_ms"])
    return float(np.median(total)), float(np.median(server))


def upsert(client: httpx.Client, url: str, docs: list[dict]) -> dict:
    r = client.post(url + "/documents", json={"documents": docs}, headers=KEY)
    r.raise_for_status()
    return r.json()


def time_to_visible(
    client: httpx.Client, url_a: str, url_b: str, docs: list[dict], poll: float
) -> list[float]:
    """ms from A's answer to an upsert until B serves the document, one write at a time."""
    visible = []
    rng = random.Random(0)
    for doc in docs:
        # a random phase against B's poller: writing right after B's last tick would measure
        # the worst case every time
        time.sleep(rng.uniform(0, poll))
        upsert(client, url_a, [doc])
        t0 = time.perf_counter()
        while client.get(f"{url_b}/documents/{doc['id']}").status_code != 200:
            time.sleep(0.005)
        visible.append((time.perf_counter() - t0) * 1000)
    return visible


def replace_one_percent(client: httpx.Client, url_a: str, args: argparse.Namespace, new_texts: list) -> None:
    """1 % of the corpus replaced (new text for (document, text) pairs): that many delta documents and as
    many tombstones; the documents the earlier cells added are deleted, so the delta is that 1 % alone."""
    replaced = [{"id": d.id, "title": d.title, "text": text, "metadata": {}} for d, text in new_texts]
    for start_i in range(0, len(replaced), 64):
        upsert(client, url_a, replaced[start_i : start_i + 64])
    added = [f"single-{i}" for i in range(args.singles)]
    added += [f"batch{j}-{i}" for j in range(args.batches) for i in range(64)]
    added += [f"visible-{i}" for i in range(args.visible)]
    for start_i in range(0, len(added), 64):
        r = client.post(url_a + "/documents/delete", json={"ids": added[start_i : start_i + 64]}, headers=KEY)
        r.raise_for_status()


def print_table(
    args: argparse.Namespace,
    single_rate: float,
    batch_rate: float,
    visible: list[float],
    state: dict,
    no_delta: tuple[float, float],
    with_delta: tuple[float, float],
) -> None:
    (none_total, none_search), (delta_total, delta_search) = no_delta, with_delta
    p50, p99 = np.percentile(visible, 50), np.percentile(visible, 99)
    print(f"\nbundle: {args.docs} scifact documents, flat index, torch encoder; poll {args.poll} s")
    print("| measure | value |")
    print("|---|---:|")
    print(f"| upserts/s, 1 document per request ({args.singles} requests, sequential) | {single_rate:.1f} |")
    print(f"| upserts/s, 64 per request ({args.batches} requests) | {batch_rate:.1f} |")
    print(f"| time to visible on replica B, p50 / p99 ms ({len(visible)} writes) | {p50:.0f} / {p99:.0f} |")
    print(
        f"| /search p50 ms end to end: no delta / {state['delta_docs']} delta docs + {state['tombstones']} "
        f"tombstones | {none_total:.2f} / {delta_total:.2f} ({delta_total / none_total:.2f}x) |"
    )
    print(
        f"| server search_ms p50: no delta / with it | {none_search:.3f} / {delta_search:.3f} "
        f"({delta_search / max(none_search, 1e-9):.2f}x) |"
    )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=int, default=1000, help="scifact documents in the bundle")
    ap.add_argument("--poll", type=float, default=2.0, help="SEARCH_RELOAD_POLL_SECONDS of both replicas")
    ap.add_argument("--singles", type=int, default=50, help="1-document upsert requests")
    ap.add_argument("--batches", type=int, default=5, help="64-document upsert requests")
    ap.add_argument("--visible", type=int, default=30, help="time-to-visible samples")
    ap.add_argument("--searches", type=int, default=200, help="search requests per /search cell")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)

    from training.data.beir import load_beir, load_corpus

    src = template(args.docs)
    all_docs = list(load_corpus(require_scifact() / "corpus.jsonl").values())
    spare = iter(all_docs[args.docs :])  # documents not in the bundle
    queries = list(load_beir(require_scifact(), "test").queries.values())
    queries = (queries * (args.searches // len(queries) + 1))[: args.searches]

    def new_docs(n: int, prefix: str) -> list[dict]:
        out = []
        for i in range(n):
            d = next(spare)
            out.append(
                {"id": f"{prefix}-{i}", "title": d.title, "text": d.text, "metadata": {"bench": prefix}}
            )
        return out

    with tempfile.TemporaryDirectory() as tmp:
        bundles = fresh_copy(src, Path(tmp) / "bundles")
        (a, url_a), (b, url_b) = (
            start(bundles, args.poll, Path(tmp) / "a.log"),
            start(bundles, args.poll, Path(tmp) / "b.log"),
        )
        try:
            with httpx.Client(timeout=120) as client:
                search_p50(client, url_a, queries[:20])  # warm up
                none_total, none_search = search_p50(client, url_a, queries)

                t0 = time.perf_counter()
                for doc in new_docs(args.singles, "single"):
                    upsert(client, url_a, [doc])
                single_rate = args.singles / (time.perf_counter() - t0)
                t0 = time.perf_counter()
                for j in range(args.batches):
                    upsert(client, url_a, new_docs(64, f"batch{j}"))
                batch_rate = args.batches * 64 / (time.perf_counter() - t0)

                visible = time_to_visible(client, url_a, url_b, new_docs(args.visible, "visible"), args.poll)

                replace_one_percent(
                    client, url_a, args, [(d, next(spare).text) for d in all_docs[: max(1, args.docs // 100)]]
                )
                state = client.get(url_a + "/bundles").json()["mutations"]
                delta_total, delta_search = search_p50(client, url_a, queries)
        finally:
            for p in (a, b):
                p.terminate()
                p.wait(timeout=30)

    print_table(
        args, single_rate, batch_rate, visible, state, (none_total, none_search), (delta_total, delta_search)
    )


if __name__ == "__main__":
    main()
