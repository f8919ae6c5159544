"""Run as a subprocess by test_streaming.py: index memory-mapped embeddings and report the peak of this
process's anonymous resident memory (RssAnon, sampled every 2 ms; file-backed pages of the memory map are
page cache the kernel can drop, so they are not what a memory cap is about).

    python -m tests.training.stream_probe <work folder> <milvus uri> <n> <dim>

Prints one JSON line: {"embeddings_bytes", "milvus_growth", "faiss_growth", "rows"}.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path

import numpy as np


def rss_anon() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no RssAnon in /proc/self/status")


class PeakSampler:
    def __init__(self) -> None:
        self.peak = rss_anon()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, rss_anon())
            time.sleep(0.002)

    def __enter__(self) -> PeakSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss_anon())


def main() -> None:
    from contract.index.backend import BackendConfig
    from contract.milvus.index import connect
    from training.data.retrieval_data import Document
    from training.export.index_factory import build_index
    from training.export.milvus_build import milvus_builder
    from training.export.shards import Shards, ShardWriter

    folder, uri, n, dim = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    rng = np.random.default_rng(0)
    writer = ShardWriter(folder / "shards", dim, n)
    for start in range(0, n, 4096):  # written chunk by chunk, as encode_to_shards does
        block = rng.normal(size=(min(4096, n - start), dim)).astype(np.float32)
        writer.append(block / np.linalg.norm(block, axis=1, keepdims=True))
    vectors = writer.close().array()  # (n, dim) read-only memmap
    assert isinstance(Shards(folder / "shards").array(), np.memmap)
    corpus = {f"d{i}": Document(f"d{i}", "", "", {"g": i % 3}) for i in range(n)}
    config = BackendConfig(backend="milvus", milvus_uri=uri, milvus_name="stream")
    client = connect(config)
    build = milvus_builder(config, corpus, metric="ip", index_kind="flat")
    base = rss_anon()
    with PeakSampler() as milvus_peak:
        _, extras = build("20260101T000000.000000Z-5be4a1", vectors, None)
    rows = int(client.get_collection_stats(extras["milvus"]["collection"])["row_count"])
    base_faiss = rss_anon()
    with PeakSampler() as faiss_peak:
        index = build_index(vectors, metric="ip", kind="flat")
    assert index.ntotal == n
    out = {
        "embeddings_bytes": int(vectors.nbytes),
        "milvus_growth": milvus_peak.peak - base,
        "faiss_growth": faiss_peak.peak - base_faiss,
        "rows": rows,
    }
    print(json.dumps(out))  # noqa: T201 - the parent test reads this line


if __name__ == "__main__":
    main()
