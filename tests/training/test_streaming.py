"""The offline path streams: embeddings on disk in memory-mapped shards, indexes built chunk by chunk.

A subprocess indexes 20k x 384 synthetic unit vectors (31 MB) from a memory map and reports its peak
anonymous memory growth (tests/training/stream_probe.py). The cap set here is half the embeddings' size:
publishing them to Milvus must stay under it (only a chunk of rows is in the process at a time), and
FAISS, whose index is itself a copy of the vectors, must not hold them twice.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np

from tests.servers import milvus_server
from training.shards import ShardWriter, exact_top_k

N, DIM = 20_000, 384


def test_indexing_a_corpus_larger_than_the_memory_cap(tmp_path, tmp_path_factory):
    with milvus_server(tmp_path_factory.mktemp("milvus")) as uri:
        out = subprocess.run(
            [sys.executable, "-m", "tests.training.stream_probe", str(tmp_path), uri, str(N), str(DIM)],
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    cap = report["embeddings_bytes"] // 2
    assert report["embeddings_bytes"] == N * DIM * 4 > cap
    assert report["rows"] == N
    assert report["milvus_growth"] < cap, report
    assert report["faiss_growth"] < 1.25 * report["embeddings_bytes"], report  # its one copy, not two


def test_shards_and_chunked_exact_search(tmp_path):
    rng = np.random.default_rng(1)
    x = rng.normal(size=(1000, 16)).astype(np.float32)
    writer = ShardWriter(tmp_path, 16, 1000, shard_rows=400)
    for start in range(0, 1000, 300):
        writer.append(x[start : start + 300])
    shards = writer.close()
    assert len(shards) == 1000 and [rows for _, rows in shards.files] == [400, 400, 200]
    np.testing.assert_array_equal(np.concatenate(shards.maps()), x)
    q = rng.normal(size=(7, 16)).astype(np.float32)
    np.testing.assert_array_equal(exact_top_k(x, q, 5, "ip"), np.argsort(-(q @ x.T), axis=1)[:, :5])
    d2 = ((q[:, None, :] - x[None, :, :]) ** 2).sum(-1)
    np.testing.assert_array_equal(exact_top_k(x, q, 5, "l2"), np.argsort(d2, axis=1)[:, :5])
