"""Where hybrid search spends its time beyond dense, in process: the micro-batch path without HTTP.

    OMP_NUM_THREADS=1 nice -n 10 .venv/bin/python -m bench hybrid_profile [--bundles var/bench/corpora/scifact/bundles]
        [--encoder static] [--batch 1,32] [--rounds 20] [--old]

Loads the live bundle of a bundles folder (bench/serving/load_bench.py builds one per corpus) with a query encoder
(`--encoder`, default the static table: the cheapest, so what is left is search), and times
`LiveBundle.answer_batch` for batches of dense and of hybrid requests (the corpus's test queries, top 10,
no filter), per query; then each part of hybrid on its own for the same queries: the encoder, the FAISS
search (k = 10 and k = the fusion depth, the whole batch in one call and one query at a time), the BM25
lists (the batch in one call), fusion, and the hits. `--old` also times the per-request hybrid path
(retrieval_modes.rows: its own FAISS search and BM25 list per request), which is what hybrid did before
unfiltered hybrid requests joined the batch. Prints CPU µs per query (this thread's CPU time, best of 3:
robust to other processes on a shared machine, blind to waiting, which the load bench measures).
"""

from __future__ import annotations

import argparse
import os
import time
from functools import partial
from pathlib import Path
from typing import Any

from bench.harness.paths import REPO


def per_query_us(fn, n_queries: int, rounds: int) -> float:
    """CPU µs per query of this thread (time.thread_time): on a shared, loaded machine wall time mostly
    measures the other processes; run with OMP_NUM_THREADS=1 so FAISS's work stays on this thread."""
    fn()  # warm-up
    best = float("inf")
    for _ in range(3):  # best of 3
        started = time.thread_time()
        for _ in range(rounds):
            fn()
        best = min(best, (time.thread_time() - started) / rounds)
    return best / n_queries * 1e6


def profile_batch(live: Any, bundle: Any, texts: list[str], rounds: int, *, old: bool) -> None:
    """Print µs per query of each part of dense and hybrid search for one batch of `texts`."""
    from app.engine import retrieval_modes
    from app.engine.search_spec import SearchSpec
    from contract.index.fusion import fuse

    def specs(mode: str) -> list[SearchSpec]:
        return [SearchSpec(texts=[t], vectors=None, top_k=10, mode=mode) for t in texts]

    params = retrieval_modes.fusion_params(bundle)
    vectors = live.encode(texts)
    scope = live.overlay.scope(None)
    depth = retrieval_modes.depth(bundle, 10)
    lexical = live.overlay.lexical_search(texts, depth, scope=scope)  # the bundle's BM25 + the log's delta
    dense = live.overlay.search(vectors, depth, scope=scope)
    rows = {
        "answer_batch, dense": partial(live.answer_batch, specs("dense")),
        "answer_batch, hybrid": partial(live.answer_batch, specs("hybrid")),
        "  encode": partial(live.encode, texts),
        "  FAISS k=10, batch in one call": partial(live.overlay.search, vectors, 10, scope=scope),
        f"  FAISS k={depth}, batch in one call": partial(live.overlay.search, vectors, depth, scope=scope),
        f"  FAISS k={depth}, one call per query": lambda: [
            live.overlay.search(vectors[i : i + 1], depth, scope=scope) for i in range(len(texts))
        ],
        f"  BM25 k={depth}, batch in one call": partial(
            live.overlay.lexical_search, texts, depth, scope=scope
        ),
        "  fusion": lambda: [fuse(d, lx, params, 10) for d, lx in zip(dense, lexical, strict=True)],
        "  hits (ids, scores)": partial(
            live.hits, [(p[:10], s[:10]) for p, s in dense], min_score=None, include=()
        ),
    }
    if old:
        rows["per-request hybrid (before)"] = lambda: [
            retrieval_modes.rows(
                bundle, "hybrid", [t], vectors[i : i + 1], 10,
                dense=partial(live.overlay.search, scope=scope),
                lexical=partial(live.overlay.lexical_search, scope=scope),
            )
            for i, t in enumerate(texts)
        ]  # fmt: skip
    print(f"\nbatch of {len(texts)} queries: µs per query", flush=True)
    for label, fn in rows.items():
        print(f"  {label:40s} {per_query_us(fn, len(texts), rounds):9.1f}", flush=True)
    print(f"  (queries of the batch with a BM25 list: {sum(len(p) > 0 for p, _ in lexical)} of {len(texts)})")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--bundles", type=Path, default=REPO / "var" / "bench" / "corpora" / "scifact" / "bundles"
    )
    parser.add_argument(
        "--data", type=Path, default=None, help="BEIR folder of its test queries (default: by name)"
    )
    parser.add_argument("--encoder", default="static")
    parser.add_argument("--batch", default="1,32")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--old", action="store_true", help="also time the per-request hybrid path")
    args = parser.parse_args(argv)

    from app.engine import retrieval_modes
    from app.engine.live_bundle import open_live_bundle
    from bench.harness.corpora import CORPORA, data_dir
    from contract.bundles.bundle import load_bundle
    from training.bundle.store import BundleStore
    from training.data.beir import load_beir

    store = BundleStore(args.bundles)
    bundle = load_bundle(store.version_path(str(store.current_version())), mmap=True)
    if bundle.lexical is None:
        raise SystemExit(f"{args.bundles}: its live bundle has no BM25 index")
    folder = args.data or data_dir(next(c for c in CORPORA if c.name == args.bundles.parent.name))
    queries = [q for q in load_beir(folder, "test").queries.values() if q.strip()]
    live = open_live_bundle(bundle, args.encoder)
    params = retrieval_modes.fusion_params(bundle)
    print(
        f"bundle {bundle.version}: {bundle.index.ntotal} documents, encoder {live.encoder_backend}, "
        f"fusion {params}; load average {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    for size in [int(b) for b in args.batch.split(",")]:
        profile_batch(live, bundle, queries[:size], args.rounds, old=args.old)
    bundle.docstore.close()


if __name__ == "__main__":
    main()
