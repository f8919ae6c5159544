"""One default training step on a CUDA GPU: seconds a step of the full retrain's recipe, on a machine that has
only torch and sentence-transformers.

    python bench/training/train_step_gpu.py MODEL_DIR BEIR_DIR [OUT_JSON] [--steps 40]

It runs standalone (no project imports: a bare GPU machine lacks FAISS, pytrec_eval, …), so it repeats the
shape of training/train/step.py's step rather than calling it: 32 (query, positive) pairs from BEIR_DIR's
qrels/train.tsv, 3 extra negatives per pair shared by the batch (the default `hard_negatives`: 3; drawn at
random from the corpus here, which costs the encoder what mined ones cost), 128 tokens (`max_seq_length`),
InfoNCE at τ = 0.05 over in-batch plus extra negatives, AdamW at lr 6e-5. The project's CUDA precision
(training/train/device.py: bf16 autocast for the encoder's forward passes, fp32 weights and loss) and plain
fp32 are timed in turn; GradCache (the project's default, one extra no-grad forward a step to bound memory)
is timed too, as a plain extra forward of the same texts. What it leaves out: the mining pass, evaluation,
the corpus encode (bench/index/corpus_encode_gpu.py measures that). The model folder may hold fp16 weights
(half the bytes to carry); they are cast to fp32 first. Measured on an H200: bench/results/train_step_gpu.json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

BATCH, NEGATIVES, MAX_TOKENS, TAU, LR = 32, 3, 128, 0.05, 6e-5


def load_pairs(beir: Path) -> tuple[list[tuple[str, str]], list[str]]:
    """(query text, positive document text) pairs of the train split, and every document text."""
    docs = {}
    with open(beir / "corpus.jsonl", encoding="utf-8") as f:
        for d in map(json.loads, f):
            title = (d.get("title") or "").strip()
            docs[d["_id"]] = f"{title} {d['text']}".strip() if title else d["text"]
    with open(beir / "queries.jsonl", encoding="utf-8") as f:
        queries = {q["_id"]: q["text"] for q in map(json.loads, f)}
    pairs = []
    with open(beir / "qrels" / "train.tsv", encoding="utf-8") as f:
        for line in f:
            qid, did, *rest = line.rstrip("\n").split("\t")
            if qid in queries and did in docs and (not rest or rest[-1] != "0"):
                pairs.append((queries[qid], docs[did]))
    return pairs, list(docs.values())


def make_step(model: Any, pairs: list[tuple[str, str]], corpus: list[str]) -> Callable[[str, bool], None]:
    """One training step of `model` on a seeded random batch, in `precision` (bf16 | fp32), with or without
    GradCache's extra forward."""
    import torch
    import torch.nn.functional as F

    rng = random.Random(0)
    optimiser = torch.optim.AdamW(model.parameters(), lr=LR)

    def embed(texts: list[str]) -> torch.Tensor:
        features = model.tokenize(texts)
        features = {
            k: v.to("cuda", non_blocking=True) if torch.is_tensor(v) else v for k, v in features.items()
        }
        return model(features)["sentence_embedding"]  # (n, D)

    def step(precision: str, grad_cache: bool) -> None:
        batch = rng.sample(pairs, BATCH)
        queries, positives = [q for q, _ in batch], [d for _, d in batch]
        extra = rng.sample(corpus, NEGATIVES * BATCH)
        autocast = (
            torch.autocast("cuda", dtype=torch.bfloat16) if precision == "bf16" else contextlib.nullcontext()
        )
        if grad_cache:  # GradCache's first pass: every text once more, without gradients
            with torch.no_grad(), autocast:
                embed(queries + positives + extra)
        with autocast:
            q = embed(queries)  # (B, D)
            d = embed(positives + extra)  # (B + N, D)
        q, d = F.normalize(q.float(), dim=-1), F.normalize(d.float(), dim=-1)
        logits = q @ d.T / TAU  # (B, B + N): the loss stays fp32
        loss = F.cross_entropy(logits, torch.arange(BATCH, device="cuda"))
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        optimiser.step()

    return step


def time_cell(
    step: Callable[[str, bool], None], precision: str, grad_cache: bool, steps: int
) -> dict[str, Any]:
    """Seconds a step after 5 of warm-up, and the GPU's peak memory over the timed ones."""
    import torch

    for _ in range(5):
        step(precision, grad_cache)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    started = time.perf_counter()
    for _ in range(steps):
        step(precision, grad_cache)
    torch.cuda.synchronize()
    return {
        "precision": precision,
        "grad_cache": grad_cache,
        "steps": steps,
        "s_per_step": round((time.perf_counter() - started) / steps, 4),
        "gpu_peak_mb": round(torch.cuda.max_memory_allocated() / 2**20),
    }


def main(argv: list[str] | None = None) -> None:
    import torch
    from sentence_transformers import SentenceTransformer

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model_dir", type=Path)
    p.add_argument("beir_dir", type=Path)
    p.add_argument("out", type=Path, nargs="?")
    p.add_argument("--steps", type=int, default=40, help="timed steps per cell (after 5 of warm-up)")
    args = p.parse_args(argv)
    pairs, corpus = load_pairs(args.beir_dir)
    model = SentenceTransformer(str(args.model_dir), device="cuda").float().train()
    model.max_seq_length = MAX_TOKENS
    step = make_step(model, pairs, corpus)
    result: dict[str, Any] = {
        "device": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "pairs": len(pairs),
    }
    result |= {"batch": BATCH, "extra_negatives": NEGATIVES * BATCH, "max_tokens": MAX_TOKENS, "rows": []}
    # two passes over the four cells: the first pass's first cell also pays CUDA's kernel selection, which
    # 5 warm-up steps did not absorb on the H200 (bf16 came out slower than fp32 there); the second is the one
    # to quote
    for rep in (1, 2):
        for precision in ("bf16", "fp32"):
            for grad_cache in (False, True):
                row = {"pass": rep} | time_cell(step, precision, grad_cache, args.steps)
                result["rows"].append(row)
                print(json.dumps(row), flush=True)
    if args.out is not None:
        args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
