"""The offline path streams: embeddings on disk in memory-mapped shards, indexes built chunk by chunk.

A subprocess indexes 20k x 384 synthetic unit vectors (31 MB) from a memory map and reports its peak
anonymous memory growth (tests/training/stream_probe.py). The cap set here is half the embeddings' size:
publishing them to Milvus must stay under it (only a chunk of rows is in the process at a time), and
FAISS, whose index is itself a copy of the vectors, must not hold them twice.

The second probe (tests/training/index_probe.py) runs the real `index_model` on 60k documents whose
embeddings (92 MB, synthetic vectors in place of the encoder's, for speed) are larger than the cap set
for it: twice the embeddings is the limit, i.e. they are never held in RAM twice. Before the offline path
streamed, the same run grew by ~2.5x (measured: 232 MB; streamed: 139 MB, of which the FAISS index is one
copy and the publish step's validation load of the bundle, model included, is the rest).
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np

from tests.servers import milvus_server
from training.data.retrieval_data import Document
from training.eval.embedding_cache import EmbeddingCache
from training.eval.evaluate import encode_corpus
from training.export.shards import ShardWriter, encode_corpus_to_disk, exact_top_k

N, DIM = 20_000, 384
N_INDEX = 60_000  # index_model's probe: 92 MB of embeddings


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


def test_index_model_never_holds_the_corpus_embeddings_twice(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "tests.training.index_probe", str(tmp_path), str(N_INDEX)],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["embeddings_bytes"] == N_INDEX * DIM * 4
    assert report["n_vectors"] == report["ntotal"] == N_INDEX
    assert report["growth"] < 2 * report["embeddings_bytes"], report
    assert report["leftovers"] == []  # the scratch folder of shards went with the build


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


def test_encode_corpus_to_disk_matches_encode_corpus_and_uses_the_cache(shared_encoder, tmp_path):
    corpus = {f"d{i}": Document(f"d{i}", f"title {i}", f"text number {i}", {}) for i in range(7)}
    _, expected = encode_corpus(shared_encoder, corpus, show_progress=False)  # (7, dim) in RAM
    streamed = encode_corpus_to_disk(shared_encoder, corpus, tmp_path / "a", show_progress=False)
    assert isinstance(streamed, np.memmap) and (tmp_path / "a" / "shards.json").is_file()
    np.testing.assert_allclose(np.asarray(streamed), expected, atol=1e-5)
    cache = EmbeddingCache(tmp_path / "cache")
    miss = encode_corpus_to_disk(shared_encoder, corpus, tmp_path / "b", cache=cache, show_progress=False)
    assert (tmp_path / "b" / "shards.json").is_file()  # encoded into the shard, then stored in the cache
    hit = encode_corpus_to_disk(shared_encoder, corpus, tmp_path / "c", cache=cache, show_progress=False)
    assert not (tmp_path / "c").exists()  # a hit encodes nothing
    assert isinstance(hit, np.memmap) and not hit.flags.writeable
    np.testing.assert_array_equal(np.asarray(hit), np.asarray(miss))
