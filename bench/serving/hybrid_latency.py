"""What lexical and hybrid search add to POST /search: p50 per query at one client, at scifact size and
with the corpus repeated to ~100k documents.

    flock BENCH_LOCK .venv/bin/python -m bench hybrid_latency WORK_DIR [--scale 20] [--rounds 3]

Builds a bundle (flat exact index, BM25 index, base all-MiniLM-L6-v2; corpus embeddings from
WORK_DIR/embeddings when cached), serves it with the real app in process (TestClient: lifespan,
micro-batching, torch query encoder) and sends the 300 scifact test queries one at a time in each mode,
modes interleaved per query so machine load hits them alike. The query-embedding cache is warmed first,
so the encoder's cost (the same in dense and hybrid) drops out and the difference is the search itself.
At --scale N the corpus is repeated N times (distinct ids; embeddings jittered, renormalised), so BM25's
postings and the flat index grow like a real 100k corpus's would. Prints p50 / p95 of the server's
total_ms and search_ms per mode, and hybrid − dense.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np
from fastapi.testclient import TestClient

from app.main import create_app
from app.settings import Settings
from bench.harness.paths import require_scifact
from contract.encoding.encoder import Encoder
from contract.jobs.plan import IndexPlan
from training.bundle.build import BuildOptions, build_bundle
from training.bundle.store import BundleStore
from training.data.beir import load_beir
from training.data.retrieval_data import RetrievalData
from training.eval.embedding_cache import EmbeddingCache
from training.eval.evaluate import encode_corpus
from training.hybrid.lexical_step import attach_lexical

MODES = ("dense", "lexical", "hybrid")


def bundle_at_scale(encoder: Encoder, data: RetrievalData, emb: np.ndarray, scale: int, bundles: Path) -> str:
    rng = np.random.default_rng(0)
    corpus = dict(data.corpus)
    rows = [emb]
    for r in range(1, scale):
        corpus.update({f"{d}#{r}": replace(doc, id=f"{d}#{r}") for d, doc in data.corpus.items()})
        jitter = emb + rng.normal(0, 0.02, emb.shape).astype(np.float32)
        rows.append(jitter / np.linalg.norm(jitter, axis=1, keepdims=True))
    doc_emb = np.concatenate(rows)  # (n_docs * scale, dim)
    store = BundleStore(bundles)
    with store.build_dir() as staging:
        build_bundle(
            encoder,
            corpus,
            staging_dir=staging,
            doc_embeddings=doc_emb,
            build=BuildOptions(index=IndexPlan(kind="flat"), show_progress=False),
        )
        big = RetrievalData(corpus=corpus, queries=data.queries, qrels=data.qrels, source=data.source)
        q = encoder.encode(list(data.queries.values()), kind="query")
        attach_lexical(staging, encoder, big, doc_emb, q, None)
        return store.publish(staging, force=True).version


def pct(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(p * len(s)))]


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(level=logging.WARNING)
    ap = argparse.ArgumentParser()
    ap.add_argument("work", type=Path)
    ap.add_argument("--scale", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    data = load_beir(require_scifact(), "test")
    encoder = Encoder.load()
    _, emb = encode_corpus(encoder, data.corpus, cache=EmbeddingCache(args.work / "embeddings"))
    queries = list(data.queries.values())
    print(
        f"{'docs':>7} {'mode':<8} {'total p50':>9} {'p95':>7} {'search p50':>10} {'p95':>7}  (ms, server side)"
    )
    for scale in (1, args.scale):
        with tempfile.TemporaryDirectory() as tmp:
            bundles = Path(tmp)
            bundle_at_scale(encoder, data, np.asarray(emb), scale, bundles)
            settings = Settings(bundles_dir=bundles, encoder_backend="torch")
            total: dict[str, list[float]] = {m: [] for m in MODES}
            search: dict[str, list[float]] = {m: [] for m in MODES}
            with TestClient(create_app(settings)) as client:
                for q in queries:  # warm the query cache (and every code path)
                    for m in MODES:
                        client.post("/search", json={"query": q, "top_k": 10, "mode": m})
                for _ in range(args.rounds):
                    for q in queries:
                        for m in MODES:
                            t = client.post("/search", json={"query": q, "top_k": 10, "mode": m}).json()[
                                "timings"
                            ]
                            total[m].append(t["total_ms"])
                            search[m].append(t["search_ms"])
            n = len(data.corpus) * scale
            for m in MODES:
                print(
                    f"{n:>7} {m:<8} {statistics.median(total[m]):>9.3f} {pct(total[m], 0.95):>7.3f} "
                    f"{statistics.median(search[m]):>10.3f} {pct(search[m], 0.95):>7.3f}",
                    flush=True,
                )
            diff = [h - d for h, d in zip(total["hybrid"], total["dense"], strict=True)]
            print(f"{n:>7} hybrid - dense, per query: p50 {statistics.median(diff):+.3f} ms", flush=True)


if __name__ == "__main__":
    main()
