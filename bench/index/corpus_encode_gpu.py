"""The full retrain's corpus encode on a CUDA GPU: docs/s of torch (what `--device auto` uses there) by batch
size and precision, on a machine that has only torch and sentence-transformers.

    python bench/index/corpus_encode_gpu.py MODEL_DIR CORPUS_JSONL[.gz] [OUT_JSON]

It runs standalone (no project imports: a bare GPU machine lacks FAISS, pytrec_eval, …), so it repeats two
things of the project's: contract.encoding.encoder.document_text, and the order and chunks in which
training.eval.evaluate._encode_texts hands texts to the encoder (longest first, 1,024 per call). Rows:
fp32 (the pipeline's: Encoder.encode applies no autocast) at batch 32 (the pipeline's), 128 and 512, then
the same in fp16 with the smallest cosine to fp32's rows. The model folder may hold fp16 weights (half the
bytes to carry); they are cast to fp32 before the fp32 rows, so those cost what the fp32 model costs.
Measured on an H200: bench/results/corpus_encode_gpu.json.
"""

from __future__ import annotations

import gzip
import json
import sys
import time
from pathlib import Path

import numpy as np

CHUNK = 1024  # training.eval.evaluate.CHECKPOINT_DOCS


def document_text(title: str | None, text: str) -> str:
    title = (title or "").strip()
    return f"{title} {text}".strip() if title else text


def main(argv: list[str] | None = None) -> None:
    import torch
    from sentence_transformers import SentenceTransformer

    args = sys.argv[1:] if argv is None else argv
    model_dir, corpus_file = Path(args[0]), Path(args[1])
    out = Path(args[2]) if len(args) > 2 else None
    opener = gzip.open if corpus_file.suffix == ".gz" else open
    with opener(corpus_file, "rt", encoding="utf-8") as f:
        texts = [document_text(d.get("title"), d["text"]) for d in map(json.loads, f)]
    model = SentenceTransformer(str(model_dir), device="cuda").float().eval()
    dim = model.get_sentence_embedding_dimension()

    def encode(batch: int) -> np.ndarray:
        order = np.argsort([-len(t) for t in texts], kind="stable")
        emb = np.empty((len(texts), dim), dtype=np.float32)
        for start in range(0, len(texts), CHUNK):
            rows = order[start : start + CHUNK]
            emb[rows] = model.encode([texts[i] for i in rows], batch_size=batch, normalize_embeddings=True)
        return emb

    result = {
        "device": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "docs": len(texts),
        "rows": [],
    }
    model.encode(texts[:256], batch_size=32)  # warm-up: CUDA context and kernels
    reference = None
    for dtype in ("fp32", "fp16"):
        if dtype == "fp16":
            model.half()
        for batch in (32, 128, 512):
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            started = time.perf_counter()
            emb = encode(batch)
            torch.cuda.synchronize()
            wall = time.perf_counter() - started
            reference = emb if reference is None else reference
            row = {
                "dtype": dtype,
                "batch": batch,
                "wall_s": round(wall, 2),
                "docs_per_s": round(len(texts) / wall, 1),
                "gpu_peak_mb": round(torch.cuda.max_memory_allocated() / 2**20),
                "min_cos_vs_fp32_b32": round(float((emb * reference).sum(1).min()), 6),
            }
            result["rows"].append(row)
            print(json.dumps(row), flush=True)
    if out is not None:
        out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
