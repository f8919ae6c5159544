"""Corpus encoding throughput: torch vs onnxruntime fp32 of the same weights, at scifact passage lengths.

    flock BENCH_LOCK .venv/bin/python -m bench corpus_encode_bench [n=256] [batches=16,32,64]

Passages are the first n scifact documents (document_text(title, abstract), up to 256 tokens) when
../shared/data/scifact exists, else the demo dataset's docstrings. Both encoders sort by length before
batching (sentence-transformers does it inside `encode`; OnnxQueryEncoder.encode does it too). Cells are
interleaved (torch, onnx, torch, onnx …) so load from other processes hits both alike; each prints
passages/s (median of 2 runs) and the smallest cosine between the two encoders' rows, which must be
>= 1 - 1e-4 for ONNX to replace torch on corpora.
"""

from __future__ import annotations

import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.harness.paths import SCIFACT
from bench.harness.usage import asked_for_help
from contract.encoding.encoder import Encoder, default_model_path, document_text
from contract.encoding.onnx_encoder import OnnxQueryEncoder
from training.data.beir import load_corpus
from training.data.demo_data import build_demo_dataset
from training.export.onnx_export import export_onnx


def passages(n: int, tmp: Path) -> tuple[str, list[str]]:
    if (SCIFACT / "corpus.jsonl").exists():
        source, folder = "scifact", SCIFACT
    else:
        source, folder = "demo docstrings", build_demo_dataset(tmp / "pydocs", n_docs=max(n, 400), n_test=100)
    docs = list(load_corpus(folder / "corpus.jsonl").values())[:n]
    return source, [document_text(d.title, d.text) for d in docs]


def rate(fn, texts: list[str]) -> tuple[float, np.ndarray]:
    start = time.perf_counter()
    emb = fn(texts)
    return len(texts) / (time.perf_counter() - start), emb


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if asked_for_help(argv, __doc__):
        return
    args = dict(a.split("=", 1) for a in argv)
    n = int(args.get("n", 256))
    batches = [int(b) for b in args.get("batches", "16,32,64").split(",")]
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        source, texts = passages(n, tmp)
        model_dir = tmp / "model"
        shutil.copytree(default_model_path(), model_dir)  # the packaged folder may be read-only
        export_onnx(model_dir, quantize=False)
        torch_enc = Encoder.load(model_dir)
        onnx_enc = OnnxQueryEncoder.load(model_dir, variant="fp32")
        torch_enc.encode(texts[:16], kind="document")  # warm-up
        onnx_enc.encode(texts[:16])
        print(f"{len(texts)} {source} passages, all-MiniLM-L6-v2, max 256 tokens")
        for b in batches:
            t_runs, o_runs = [], []
            for _ in range(2):
                r, t_emb = rate(lambda x, b=b: torch_enc.encode(x, kind="document", batch_size=b), texts)
                t_runs.append(r)
                r, o_emb = rate(lambda x, b=b: onnx_enc.encode(x, batch_size=b), texts)
                o_runs.append(r)
            t, o = statistics.median(t_runs), statistics.median(o_runs)
            cos = float((t_emb * o_emb).sum(1).min())
            print(
                f"batch {b:>3}: torch {t:6.1f} passages/s  onnx fp32 {o:6.1f} passages/s  ({o / t:.2f}x)  min cosine {cos:.6f}"
            )


if __name__ == "__main__":
    main()
