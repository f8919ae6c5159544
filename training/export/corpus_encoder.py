"""Which runtime encodes a tuned model's corpus: torch, or its ONNX export (fp32 or int8), measured on the
machine that runs it and gated on nDCG@10 like the query encoders.

The corpus encode is the one part of a full retrain that grows with the corpus (training/train/trainer.py
encodes it once, with the tuned model, and the index is built from those vectors). On an earlier 2-core
development CPU (AVX-512 VNNI) the int8 export encoded scifact abstracts ~2.5x faster than torch and
fp32 ONNX ~1.4x (one thread, under load; bench/index/corpus_encode_bench.py measures fp32 vs torch); on the
current one (AMD EPYC, AVX2, no VNNI) fp32 ONNX is 0.96x torch and int8, forced in, 1.40x on the packages
15k probe (bench/results/corpus_encode_scale.txt), so int8 is a candidate on every CPU, not only where VNNI
promises it a gain: the probe, not the CPU's flags, decides. That costs the int8 export and one more probe
pass over 256 documents (~27 s at the probe's 9.5 docs/s), against a 15k corpus encode that took 728 s on
torch (bench/results/retrain_scale_packages15k.txt). The int8 rows are not torch's (smallest cosine ~0.99
on scifact abstracts), so a candidate is used only when, on a probe pool (the judged documents of up
to PROBE_QUERIES evaluation queries plus random others, PROBE_DOCS in all), its document vectors lose
at most MAX_NDCG_LOSS nDCG@10 against torch's (the same torch query vectors, exact search over the pool),
and it is at least MIN_SPEEDUP faster there. Small corpora (under MIN_DOCS) stay on torch: the export
and the probe would cost more than they save.

The choice and its measurements go into metrics.json (`corpus_encoder`) and from there into the bundle.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from contract.config import TrainConfig
from contract.defaults import MAX_NDCG_LOSS
from contract.encoding.encoder import Encoder, TextKind, document_text
from contract.encoding.onnx_encoder import OnnxQueryEncoder
from training.data.retrieval_data import RetrievalData
from training.eval.encode_rate import timed

logger = logging.getLogger(__name__)

MIN_DOCS = 5000
PROBE_DOCS = 256
PROBE_QUERIES = 64
MIN_SPEEDUP = 1.15
CHOICES = ("auto", "torch", "onnx", "onnx-int8")


def cpu_has_vnni() -> bool:
    """AVX-512 VNNI or AVX-VNNI (Linux /proc/cpuinfo): int8 matrix products onnxruntime accelerates."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "avx512_vnni" in flags or "avx_vnni" in flags


class OnnxCorpusEncoder(Encoder):
    """The tuned model with its documents encoded by onnxruntime; queries stay torch's."""

    def __init__(self, base: Encoder, onnx: OnnxQueryEncoder, variant: str):
        super().__init__(base.model, base.similarity, source=base.source)
        self.onnx = onnx
        self.document_backend = f"onnx-{variant}"  # part of the embedding cache's key

    def encode(
        self,
        texts: Sequence[str],
        *,
        kind: TextKind = "document",
        batch_size: int = 32,
        show_progress: bool = False,
    ) -> np.ndarray:
        if kind == "document":
            return self.onnx.encode(texts, batch_size=batch_size)  # (n, D) normalised
        return super().encode(texts, kind=kind, batch_size=batch_size, show_progress=show_progress)


def corpus_encoder_for(
    encoder: Encoder, model_dir: Path, data: RetrievalData, config: TrainConfig
) -> tuple[Encoder, dict[str, Any]]:
    """The trainer's hook (training.train.trainer.CorpusEncoderChoice): `config.corpus_encoder`, its seed."""
    return choose_corpus_encoder(encoder, model_dir, data, choice=config.corpus_encoder, seed=config.seed)


def choose_corpus_encoder(
    encoder: Encoder, model_dir: Path, data: RetrievalData, *, choice: str = "auto", seed: int = 0
) -> tuple[Encoder, dict[str, Any]]:
    """(the encoder to encode `data.corpus` with, the record of why). `choice` forces a runtime."""
    if choice == "torch" or encoder.two_towers or encoder.metric != "cosine":
        return encoder, {"chosen": "torch", "reason": "asked for" if choice == "torch" else "not an option"}
    if choice == "auto" and len(data.corpus) < MIN_DOCS:
        return encoder, {"chosen": "torch", "reason": f"{len(data.corpus)} documents < {MIN_DOCS}"}
    import torch

    from training.export.onnx_export import export_onnx

    started = time.perf_counter()
    int8 = choice in ("auto", "onnx-int8")
    export_onnx(model_dir, quantize=int8)
    threads = torch.get_num_threads()  # the same threads as torch: a fair race
    candidates = {"onnx": OnnxQueryEncoder.load(model_dir, variant="fp32", threads=threads)}
    if int8:
        candidates["onnx-int8"] = OnnxQueryEncoder.load(model_dir, variant="int8", threads=threads)
    if choice in candidates:
        variant = "fp32" if choice == "onnx" else "int8"
        return OnnxCorpusEncoder(encoder, candidates[choice], variant), {
            "chosen": choice,
            "reason": "asked for",
        }
    record = probe(encoder, candidates, data, seed)
    record["seconds"] = round(time.perf_counter() - started, 2)
    chosen = str(record["chosen"])
    logger.info("corpus encoder: %s (%s)", chosen, record["candidates"])
    if chosen == "torch":
        return encoder, record
    return OnnxCorpusEncoder(encoder, candidates[chosen], "fp32" if chosen == "onnx" else "int8"), record


def probe(
    encoder: Encoder, candidates: dict[str, OnnxQueryEncoder], data: RetrievalData, seed: int
) -> dict[str, Any]:
    """Docs/s and nDCG@10 of each runtime's document vectors on a probe pool; the fastest within the loss."""
    from training.eval.search_metrics import search_metrics

    rng = np.random.default_rng(seed)
    qids = [q for q in data.queries if data.qrels.get(q)]
    qids = [qids[i] for i in sorted(rng.permutation(len(qids))[:PROBE_QUERIES])]
    judged = [d for q in qids for d in data.qrels[q] if d in data.corpus]
    pool = list(dict.fromkeys(judged))[:PROBE_DOCS]
    others = [d for d in data.corpus if d not in set(pool)]
    pool += [others[i] for i in rng.permutation(len(others))[: max(0, PROBE_DOCS - len(pool))]]
    texts = [document_text(data.corpus[d].title, data.corpus[d].text) for d in pool]
    query_emb = encoder.encode([data.queries[q] for q in qids], kind="query")  # (nq, D)
    runners = {"torch": lambda t: encoder.encode(t, kind="document")} | {
        name: (lambda t, c=c: c.encode(t, batch_size=32)) for name, c in candidates.items()
    }
    rows: dict[str, dict[str, float]] = {}
    for name, run in runners.items():
        docs, rate = timed(run, texts)  # (pool, D), docs/s
        ndcg = search_metrics(encoder.similarity, query_emb, qids, data.qrels, pool, doc_embeddings=docs)
        rows[name] = {"docs_per_s": round(rate, 2), "ndcg@10": ndcg["ndcg@10"]}
    base = rows["torch"]
    for row in rows.values():
        row["ndcg_loss"] = round(base["ndcg@10"] - row["ndcg@10"], 6)
        row["speedup"] = round(row["docs_per_s"] / base["docs_per_s"], 3)
    eligible = [
        n
        for n, r in rows.items()
        if n == "torch" or (r["ndcg_loss"] <= MAX_NDCG_LOSS and r["speedup"] >= MIN_SPEEDUP)
    ]
    chosen = max(eligible, key=lambda n: rows[n]["docs_per_s"])
    return {
        "chosen": chosen,
        "candidates": rows,
        "probe": {"documents": len(pool), "queries": len(qids)},
        "rule": f"fastest of torch and the ONNX runtimes within {MAX_NDCG_LOSS} nDCG@10 of torch's document "
        f"vectors and at least {MIN_SPEEDUP}x faster, on the probe pool",
    }
