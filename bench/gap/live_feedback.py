"""Does the live section of GET /generalization-gap tell traffic like the test split from shifted traffic?

    nice -n 10 env OMP_NUM_THREADS=1 .venv/bin/python -m bench live_feedback OUT_DIR \
        [--corpora demo,scifact,pycode] [--seeds 10] [--users 40] [--populations same,keywords,jargon,test]
        [--results bench/results/live_feedback.json]

Issue 41, item 4 (a) and (b)'s verdict. Per corpus the training queries are split once (seed 0) into A (half:
the fine-tune trains on it), R (a quarter: the pipeline's evaluation split, so the report's `risk_test`
interval — the served prediction — is measured on R) and U (a quarter that neither sees). One bundle is
built by the real pipeline (the demo's recipe: one epoch, in-batch negatives, 64 tokens; no ONNX, no
distillation) and published. Then, per population and seed, a fresh judgment store and the real app
(TestClient with its lifespan): `--users` queries drawn (seeded) from the population each search
`POST /search` (dense) once, and the simulated user sends, with that answer's `search_id`, a judgment
`relevant: true` for each of the query's qrels documents and `relevant: false` for the shown hits above
them that are not in its qrels; the bench then reads the `live` section's verdict and intervals.

Populations:
- `same`: U, queries of the same population as R (a: the verdict should be *consistent*);
- `keywords`: U's queries rewritten as a search-box user types them — the three words of the query that
  are rarest in the corpus, lower-cased, in order of rarity (English stop words never qualify) — over the
  same documents and qrels: a shift of query style the model was not trained for (b: *worse than
  predicted* should be flagged when the model is worse on it);
- `jargon`: U's queries that use one of its 30 most frequent content words, each renamed to an invented word
  (`jargon_queries`): a shift of vocabulary, which judgments can teach (bench/gap/feedback_retrain.py);
- `test`: the corpus's own test split (scifact: other claims, document-disjoint from train; demo: other
  standard-library objects), for reference.

Simulated users judge every document of their qrels, found or not: real users judge what they were shown,
so real judgments over-represent documents the model already ranks high, and the live risk on them is
biased low (docs/gap-report.md). The retrain half of (b) — whether `feedback: include` raises nDCG@10 on
held-out shifted queries — is bench/gap/feedback_retrain.py, on this bench's corpus folders.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import math
import random
import re
import subprocess
import sys
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench.gap.predictive_validity import corpus_source, pool_ids, split_queries, write_beir
from training.data.beir import load_beir
from training.data.retrieval_data import RetrievalData

logger = logging.getLogger(__name__)
KEY = "bench-key"
# the demo's recipe (scripts/demo.sh): minutes on 2 cores; what is measured is the report, not the gain
PIPELINE_OPTS = ["--epochs", "1", "--hard-negatives", "0", "--max-seq-length", "64", "--no-grad-cache"]
PIPELINE_OPTS += ["--no-onnx", "--no-distill", "--index", "flat", "--quiet"]
STOP_WORDS = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "by",
        "can",
        "do",
        "does",
        "for",
        "from",
        "has",
        "have",
        "how",
        "in",
        "into",
        "is",
        "it",
        "its",
        "of",
        "on",
        "or",
        "that",
        "the",
        "their",
        "this",
        "to",
        "was",
        "what",
        "when",
        "where",
        "which",
        "who",
        "why",
        "will",
        "with",
        "not",
        "no",
        "than",
        "then",
        "there",
        "these",
        "those",
    ]
)
WORD = re.compile(r"[a-z0-9]+")


def keyword_queries(data: RetrievalData) -> RetrievalData:
    """The same queries, qrels and documents, each query reduced to its three rarest words in the corpus."""
    df: Counter[str] = Counter()
    for doc in data.corpus.values():
        df.update(set(WORD.findall(f"{doc.title} {doc.text}".lower())))
    rewritten = {}
    for qid, text in data.queries.items():
        words = [w for w in dict.fromkeys(WORD.findall(text.lower())) if w not in STOP_WORDS and len(w) > 2]
        rewritten[qid] = " ".join(sorted(words, key=lambda w: (df[w], w))[:3]) or text
    return replace(data, queries=rewritten)


JARGON_WORDS = 30  # the population's most frequent content words renamed: in 67-74 % of demo's queries


def jargon_queries(data: RetrievalData, source: RetrievalData | None = None) -> RetrievalData:
    """The queries that use one of `source`'s (default: `data`'s) JARGON_WORDS most frequent content words,
    each of those words replaced by an invented code word (the same one everywhere), with their qrels.

    A shift of vocabulary, not of information: users who call things by an in-house name the documents never
    use ("a zokaru of the vemil" for "a list of the bytes"). The base model cannot know the code words, but a
    judged query that uses one says what it means, so unlike `keywords` (which drops words) it is learnable.
    """
    df: Counter[str] = Counter()
    for text in (source or data).queries.values():
        df.update(w for w in set(WORD.findall(text.lower())) if w not in STOP_WORDS and len(w) > 2)
    mapping = {w: _code_word(w) for w, _ in df.most_common(JARGON_WORDS)}
    rewritten: dict[str, str] = {}
    for qid, text in data.queries.items():
        words = WORD.findall(text.lower())
        if any(w in mapping for w in words):
            rewritten[qid] = " ".join(mapping.get(w, w) for w in words)
    return replace(data, queries=rewritten, qrels={q: data.qrels[q] for q in rewritten if q in data.qrels})


def _code_word(word: str) -> str:
    """A pronounceable six-letter word derived from `word` (deterministic across runs and machines)."""
    digest = hashlib.sha256(word.encode("utf-8")).digest()
    letters = ("bdfgklmnprstvz", "aeiou")  # consonant, vowel, consonant …
    return "".join(letters[i % 2][b % len(letters[i % 2])] for i, b in enumerate(digest[:6]))


def build_bundle(work: Path, data_dir: Path) -> Path:
    """The published bundles folder of the corpus (built once; a rerun reuses it)."""
    bundles = work / "bundles"
    if (bundles / "CURRENT").exists():
        return bundles
    command = [
        sys.executable,
        "-m",
        "training",
        "pipeline",
        "--data",
        str(data_dir),
        "--bundles",
        str(bundles),
    ]
    command += ["--work-dir", str(work / "runs"), "--train-split", "a", "--eval-split", "r", *PIPELINE_OPTS]
    started = time.perf_counter()
    subprocess.run(command, check=True)
    print(f"  pipeline: {time.perf_counter() - started:.0f} s", flush=True)
    return bundles


def judgments_for(client: Any, data: RetrievalData, qids: list[str], pool: set[str]) -> list[dict[str, Any]]:
    """One dense search per query, then its judgments tied to that answer's search id."""
    out: list[dict[str, Any]] = []
    for qid in qids:
        query, relevant = data.queries[qid], {d for d, s in data.qrels[qid].items() if s > 0 and d in pool}
        answer = client.post("/search", json={"query": query, "top_k": 10, "mode": "dense"})
        answer.raise_for_status()
        result = answer.json()["results"][0]
        search_id, shown = result["search_id"], [h["id"] for h in result["hits"]]
        last = max((shown.index(d) for d in relevant if d in shown), default=len(shown) - 1)
        out += [
            {"query": query, "document_id": d, "relevant": True, "search_id": search_id} for d in relevant
        ]
        out += [
            {"query": query, "document_id": d, "relevant": False, "search_id": search_id}
            for d in shown[:last]
            if d not in relevant
        ]
    return out


def run_seed(bundles: Path, data: RetrievalData, users: int, seed: int, pool: set[str]) -> dict[str, Any]:
    """The live section after `users` simulated users of `data` (a fresh judgment store)."""
    from fastapi.testclient import TestClient

    from app.main import create_app
    from app.settings import Settings
    from contract.feedback.store import STORE_FILE

    for suffix in ("", "-wal", "-shm"):
        (bundles / f"{STORE_FILE}{suffix}").unlink(missing_ok=True)
    eligible = sorted(q for q in data.qrels if any(d in pool for d in data.qrels[q]))
    qids = random.Random(seed).sample(eligible, min(users, len(eligible)))
    settings = Settings(bundles_dir=bundles, api_key=KEY, encoder_backend="torch", query_cache_size=0)
    with TestClient(create_app(settings)) as client:
        sent = judgments_for(client, data, qids, pool)
        for i in range(0, len(sent), 100):
            r = client.post("/feedback", json={"judgments": sent[i : i + 100]}, headers={"X-API-Key": KEY})
            r.raise_for_status()
        live = client.get("/generalization-gap").json()["live"]
    return {"seed": seed, "n_judgments": len(sent), **live}


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    verdicts = Counter(r["verdict"] for r in rows)
    risks = [r["risk"]["value"] for r in rows if "risk" in r]
    predicted = rows[0].get("predicted") or {}
    return {
        "seeds": len(rows),
        "verdicts": dict(verdicts),
        "live_risk_mean": sum(risks) / len(risks) if risks else math.nan,
        "predicted": [predicted.get("ci_low"), predicted.get("value"), predicted.get("ci_high")],
        "ndcg_at_10_mean": sum(r.get("ndcg_at_10", math.nan) for r in rows) / len(rows),
        "n_queries_mean": sum(r["n_queries"] for r in rows) / len(rows),
    }


def print_table(results: dict[str, dict[str, dict[str, Any]]]) -> None:
    head = f"{'corpus':8s} {'population':10s} {'seeds':>5s} {'consistent':>10s} {'worse':>6s} {'better':>6s}"
    head += f" {'live risk':>9s} {'predicted [95% CI]':>24s} {'nDCG@10':>8s} {'queries':>7s}"
    print(head)
    for corpus, populations in results.items():
        for name, s in populations.items():
            v = s["verdicts"]
            lo, mid, hi = s["predicted"]
            pred = f"{mid:.3f} [{lo:.3f}, {hi:.3f}]" if mid is not None else "-"
            print(
                f"{corpus:8s} {name:10s} {s['seeds']:5d} {v.get('consistent', 0):10d} "
                f"{v.get('worse than predicted', 0):6d} {v.get('better than predicted', 0):6d} "
                f"{s['live_risk_mean']:9.3f} {pred:>24s} {s['ndcg_at_10_mean']:8.3f} {s['n_queries_mean']:7.1f}"
            )


def add_corpus_options(p: argparse.ArgumentParser) -> None:
    """The options this bench and bench/gap/feedback_retrain.py share: which corpora, how they are built,
    where the numbers go."""
    p.add_argument(
        "--corpora", default="demo,scifact", help="comma-separated: demo, scifact, manpages, debpkgs, pycode"
    )
    p.add_argument("--distractors", type=int, default=1000, help="scifact: documents besides the relevant")
    p.add_argument("--results", type=Path, default=None, help="write the table's numbers as JSON here")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path, help="work folder (datasets, bundles; reused by a rerun)")
    add_corpus_options(p)
    p.add_argument("--seeds", type=int, default=10)
    p.add_argument("--users", type=int, default=40, help="simulated users (queries) per seed")
    p.add_argument("--populations", default="same,keywords,test")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    results: dict[str, dict[str, dict[str, Any]]] = {}
    for corpus in args.corpora.split(","):
        source = corpus_source(corpus, args.out)
        full_train, full_test = load_beir(source, "train"), load_beir(source, "test")
        part_a, part_r, part_u = split_queries(full_train, [0.5, 0.25, 0.25], 0)
        work = args.out / corpus
        ids = pool_ids(corpus, full_train, full_test, args.distractors)
        data_dir = work / "data"
        if not (data_dir / "corpus.jsonl").exists():
            write_beir(data_dir, ids, {"a": part_a, "r": part_r, "test": full_test})
        print(f"{corpus}: A {len(part_a.queries)}, R {len(part_r.queries)}, U {len(part_u.queries)} queries, "
              f"pool {len(ids)} documents", flush=True)  # fmt: skip
        bundles = build_bundle(work, data_dir)
        populations = {
            "same": part_u,
            "keywords": keyword_queries(part_u),
            "jargon": jargon_queries(part_u),
            "test": full_test,
        }
        pool = set(ids)
        results[corpus] = {}
        for name in args.populations.split(","):
            rows = []
            for seed in range(args.seeds):
                row = run_seed(bundles, populations[name], args.users, seed, pool)
                rows.append(row)
                print(f"  {name} seed {seed}: {row['verdict']} ({row['n_queries']} queries)", flush=True)
            results[corpus][name] = summarise(rows) | {"rows": rows}
    print_table(results)
    if args.results:
        args.results.write_text(json.dumps(results, indent=1, default=str) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
