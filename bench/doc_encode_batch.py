"""Document encoding on the serving path: which batch size LiveBundle.encode_documents should use.

    flock BENCH_LOCK .venv/bin/python bench/doc_encode_batch.py [n=96] [rounds=3] [batches=8,16,32]

Encodes the first n scifact passages (document_text(title, abstract), up to 256 tokens; the demo
dataset's docstrings when ../shared/data/scifact is absent) the way the API does for upserts, /embed
documents and re-encoded log rows: the full model's tokenizer once, then app.engine.query_tokens'
encode_token_ids in length-sorted batches. Batch sizes are interleaved within each round so load from
other processes hits them alike; prints ms per passage per batch size (median over the rounds) and the
machine's load average before and after.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from app.engine.query_tokens import QueryTokenizer, encode_token_ids
from contract.encoding.encoder import Encoder

sys.path.insert(0, str(Path(__file__).resolve().parent))

from corpus_encode_bench import passages  # the same passages as the torch-vs-ONNX bench


def main() -> None:
    args = dict(a.split("=", 1) for a in sys.argv[1:])
    n, rounds = int(args.get("n", 96)), int(args.get("rounds", 3))
    batches = [int(b) for b in args.get("batches", "8,16,32").split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        source, texts = passages(n, Path(tmp))
    encoder = Encoder.load()
    token_ids = QueryTokenizer(encoder)(texts)
    encode_token_ids(encoder, texts[:16], token_ids[:16], batch_size=8)  # warm-up
    print(f"{len(texts)} {source} passages, {sum(map(len, token_ids)) / len(texts):.0f} tokens on average")
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    ms: dict[int, list[float]] = {b: [] for b in batches}
    for _ in range(rounds):
        for b in batches:
            start = time.perf_counter()
            encode_token_ids(encoder, texts, token_ids, batch_size=b)
            ms[b].append((time.perf_counter() - start) * 1000 / len(texts))
    for b in batches:
        runs = ", ".join(f"{x:.1f}" for x in ms[b])
        print(f"batch {b:3d}: {statistics.median(ms[b]):6.1f} ms/passage (rounds: {runs})")
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
