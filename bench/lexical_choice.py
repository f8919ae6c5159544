"""Which BM25 engine goes into bundles: bm25s (sparse matrices) or SQLite FTS5 (in the document store)?

    flock /tmp/bench.lock .venv/bin/python bench/lexical_choice.py [--scale 20] [--queries 300]

Prints, for both engines, scifact nDCG@10 / recall@100 on the test and train queries (no training is
involved: both are unsupervised rankers) and the p50 / p95 latency of one query, at scifact size and with
the corpus repeated `--scale` times (5,183 × 20 ≈ 100k documents, so document frequencies stay realistic).
Both use the same stop words; FTS5 uses its `porter` stemmer, bm25s Snowball English (PyStemmer); both
BM25 with k1 = 1.2, b = 0.75. FTS5 is asked for the terms OR-ed, ranked by its bm25() function.
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

from contract.encoding.encoder import document_text
from contract.index.lexical_index import TOKEN_PATTERN, LexicalIndex, _analysis
from training.data.beir import load_beir
from training.eval.evaluate import trec_metrics
from training.hybrid.bm25_build import build_lexical_index

SCIFACT = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "scifact"
DEPTH = 100


def fts5_index(texts: list[str]) -> sqlite3.Connection:
    db = sqlite3.connect(":memory:")
    db.execute("CREATE VIRTUAL TABLE docs USING fts5(body, tokenize = 'porter unicode61')")
    db.executemany("INSERT INTO docs(rowid, body) VALUES (?, ?)", enumerate(texts))
    db.execute("INSERT INTO docs(docs) VALUES ('optimize')")
    return db


def fts5_search(db: sqlite3.Connection, text: str, k: int) -> list[tuple[int, float]]:
    stop, _ = _analysis()
    words = dict.fromkeys(w for w in TOKEN_PATTERN.findall(text.lower()) if w not in stop)
    if not words:
        return []
    match = " OR ".join('"' + w.replace('"', '""') + '"' for w in words)
    rows = db.execute(
        "SELECT rowid, bm25(docs) FROM docs WHERE docs MATCH ? ORDER BY bm25(docs) LIMIT ?", (match, k)
    ).fetchall()
    return [(int(r), -float(s)) for r, s in rows]  # FTS5's bm25() is negated: lower is better


def quality(search, data, doc_ids) -> dict[str, float]:  # type: ignore[no-untyped-def]
    run = {qid: {doc_ids[p % len(doc_ids)]: s for p, s in search(text)} for qid, text in data.queries.items()}
    per_query = trec_metrics({q: data.qrels[q] for q in run}, run, (100,))
    return {m: statistics.fmean(per_query[m].values()) for m in ("ndcg@10", "recall@100")}


def latency(search, texts: list[str]) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    times = []
    for text in texts:
        t0 = time.perf_counter()
        search(text)
        times.append((time.perf_counter() - t0) * 1000)
    times.sort()
    return times[len(times) // 2], times[int(len(times) * 0.95)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scale", type=int, default=20)
    ap.add_argument("--queries", type=int, default=300)
    args = ap.parse_args()
    test, train = load_beir(SCIFACT, "test"), load_beir(SCIFACT, "train")
    doc_ids = list(test.corpus)
    texts = [document_text(test.corpus[d].title, test.corpus[d].text) for d in doc_ids]
    query_texts = list(test.queries.values())[: args.queries]
    print(
        f"{'engine':<8} {'docs':>7} {'build s':>8} {'test nDCG@10':>13} {'R@100':>6} {'train nDCG@10':>14} "
        f"{'p50 ms':>7} {'p95 ms':>7}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        for scale in (1, args.scale):
            corpus = texts * scale
            t0 = time.perf_counter()
            index = LexicalIndex.load(build_lexical_index(corpus, Path(tmp) / f"bm25s-{scale}"))
            built = time.perf_counter() - t0

            def bm25s_search(text: str, index: LexicalIndex = index) -> list[tuple[int, float]]:
                pos, sc = index.search([text], DEPTH)[0]
                return list(zip(pos.tolist(), sc.tolist(), strict=True))

            t0 = time.perf_counter()
            db = fts5_index(corpus)
            fts_built = time.perf_counter() - t0

            def fts_search(text: str, db: sqlite3.Connection = db) -> list[tuple[int, float]]:
                return fts5_search(db, text, DEPTH)

            for name, search, b in (("bm25s", bm25s_search, built), ("fts5", fts_search, fts_built)):
                if scale == 1:
                    q_test, q_train = quality(search, test, doc_ids), quality(search, train, doc_ids)
                    cells = (
                        f"{q_test['ndcg@10']:>13.4f} {q_test['recall@100']:>6.3f} {q_train['ndcg@10']:>14.4f}"
                    )
                else:
                    cells = f"{'':>13} {'':>6} {'':>14}"
                p50, p95 = latency(search, query_texts)
                print(f"{name:<8} {len(corpus):>7} {b:>8.1f} {cells} {p50:>7.3f} {p95:>7.3f}", flush=True)
            db.close()


if __name__ == "__main__":
    main()
