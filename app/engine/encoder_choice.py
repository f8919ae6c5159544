"""Which query encoder serves a bundle: loading one by backend name, and `auto`'s timed choice.

Backends: `torch` (the bundle's model), `onnx` / `onnx-int8` (its ONNX export), `distilled` (a truncated
transformer trained into the same document space, ONNX) and `static` (a StaticEmbedding table); the last
two exist only in bundles built with distillation (`training.distill.bundle_step`).

`auto` takes every backend the bundle has whose nDCG@10 loss vs the full model, recorded in the manifest
on the evaluation split, is within `max_ndcg_loss` (torch always qualifies: it *is* the full model), loads
each, times it on this machine and serves the fastest. Timed, not assumed: on a CPU without VNNI the int8
export is no faster than fp32 (bench/load_bench.py prints both), and which is faster depends on the
machine. Each candidate encodes the recorded evaluation queries one at a time (the latency a lone client
sees), after a warm-up; the mean ms per query decides. The choice and its timings show in GET /bundles.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from contract.bundles.bundle import Bundle
from contract.bundles.report_schema import Estimate, GapReport, ServedQueryEncoder
from contract.encoding.onnx_encoder import EXTRAS_KEY as ONNX_KEY
from contract.encoding.onnx_encoder import FILES, ONNX_SUBDIR, OnnxQueryEncoder, Variant
from contract.encoding.query_encoders import EXTRAS_KEY as QE_KEY
from contract.encoding.query_encoders import load_variant, recorded_losses, timing_queries
from contract.encoding.shared_models import files_key, shared
from contract.encoding.similarity import temperature_or_default
from contract.errors import ModelLoadError

logger = logging.getLogger(__name__)

ONNX_BACKENDS: dict[str, Variant] = {"onnx": "fp32", "onnx-int8": "int8"}
DISTILLED_BACKENDS = ("distilled", "static")
MAX_TIMING_QUERIES = 32
TIMING_ROUNDS = 2  # best of 2 passes: a pass disturbed by another process's burst should not decide


def load_encoder_backend(bundle: Bundle, encoder_backend: str, *, threads: int = 0) -> Any:
    """The query encoder `encoder_backend` of `bundle` (ModelLoadError when the bundle does not carry it)."""
    if encoder_backend == "torch":
        if threads:
            import torch

            torch.set_num_threads(threads)
        return bundle.encoder
    # one loaded copy per distinct file set in the process (contract/encoding/shared_models.py)
    files = bundle.manifest.files
    if encoder_backend in ONNX_BACKENDS:
        key = files_key(files, "model/")
        return shared(
            key and f"{encoder_backend}:{threads}:{key}",
            lambda: OnnxQueryEncoder.load(
                Path(bundle.path) / "model", variant=ONNX_BACKENDS[encoder_backend], threads=threads
            ),
        )
    if encoder_backend in DISTILLED_BACKENDS:
        key = files_key(files, f"query_encoders/{encoder_backend}/")
        return shared(
            key and f"{encoder_backend}:{threads}:{key}",
            lambda: load_variant(bundle.path, encoder_backend, threads=threads),
        )
    raise ModelLoadError(f"unknown encoder backend {encoder_backend!r}")


def recorded_ndcg_losses(bundle: Bundle) -> dict[str, float]:
    """{backend: nDCG@10 loss vs the full model} for every backend this bundle carries."""
    extras = bundle.manifest.extras
    losses = {"torch": 0.0}
    onnx = (extras.get(ONNX_KEY) or {}).get("ndcg_loss") or {}
    for encoder_backend, variant in ONNX_BACKENDS.items():
        on_disk = (Path(bundle.path) / "model" / ONNX_SUBDIR / FILES[variant]).exists()
        if onnx.get(variant) is not None and on_disk:
            losses[encoder_backend] = float(onnx[variant])
    losses |= recorded_losses(extras, bundle.path)
    return losses


def time_encoder(encoder: Any, queries: list[str]) -> float:
    """Mean ms per query encoded alone, best of TIMING_ROUNDS passes after a warm-up."""
    for q in queries[:3]:
        encoder.encode([q], kind="query", batch_size=1)
    best = float("inf")
    for _ in range(TIMING_ROUNDS):
        started = time.perf_counter()
        for q in queries:
            encoder.encode([q], kind="query", batch_size=1)
        best = min(best, (time.perf_counter() - started) * 1000 / len(queries))
    return best


def choose_encoder_backend(
    bundle: Bundle, *, max_ndcg_loss: float, threads: int = 0, fallback_query: str = "a query"
) -> tuple[str, Any, dict[str, Any]]:
    """(encoder_backend, its loaded encoder, the choice record shown by GET /bundles) for `auto`."""
    queries = timing_queries(bundle.manifest.extras)[:MAX_TIMING_QUERIES] or [fallback_query]
    candidates: list[dict[str, Any]] = []
    loaded: dict[str, Any] = {}
    for encoder_backend, loss in sorted(recorded_ndcg_losses(bundle).items()):
        row: dict[str, Any] = {
            "backend": encoder_backend,
            "ndcg_loss": loss,
            "eligible": loss <= max_ndcg_loss,
        }
        if row["eligible"]:
            try:
                loaded[encoder_backend] = load_encoder_backend(bundle, encoder_backend, threads=threads)
                row["ms_per_query"] = round(time_encoder(loaded[encoder_backend], queries), 4)
            except ModelLoadError as exc:  # a damaged optional encoder must not stop the bundle
                row |= {"eligible": False, "error": str(exc)}
                logger.warning("bundle %s: %s not usable: %s", bundle.version, encoder_backend, exc)
        candidates.append(row)
    timed = [c for c in candidates if "ms_per_query" in c]
    chosen = min(timed, key=lambda c: c["ms_per_query"])["backend"] if timed else "torch"
    encoder = loaded.get(chosen) or load_encoder_backend(bundle, "torch", threads=threads)
    record = {
        "chosen": chosen,
        "max_ndcg_loss": max_ndcg_loss,
        "timed_queries": len(queries),
        "candidates": candidates,
    }
    logger.info(
        "auto query encoder for %s: %s (%s)",
        bundle.version,
        chosen,
        ", ".join(f"{c['backend']} {c.get('ms_per_query', '-')} ms" for c in candidates),
    )
    return chosen, encoder, record


def served_section(bundle: Bundle, encoder_backend: str, report: GapReport) -> ServedQueryEncoder:
    """The gap report's `served_query_encoder`: the served encoder's risk at the report's k and τ."""
    tau = temperature_or_default(report.model.logit_temperature)
    if encoder_backend in DISTILLED_BACKENDS:
        risks = ((bundle.manifest.extras.get(QE_KEY) or {}).get("served_risk")) or {}
        entry = risks.get(encoder_backend) or {}
        if entry and risks.get("k") == report.k:
            return ServedQueryEncoder(
                backend=encoder_backend,
                k=risks["k"],
                temperature=risks["temperature"],
                risk_test=Estimate(**entry["risk_test"]),
                delta_vs_full=Estimate(**entry["delta_vs_full"]),
                note="queries from the distilled encoder, documents from the full model's vectors",
            )
        return ServedQueryEncoder(
            backend=encoder_backend,
            k=report.k,
            temperature=tau,
            note="not measured at this k when the bundle was built",
        )
    note = "the report's own model"
    if encoder_backend == "onnx-int8":
        note += ", int8-quantized; its nDCG@10 loss is in the manifest and GET /bundles"
    return ServedQueryEncoder(
        backend=encoder_backend, k=report.k, temperature=tau, risk_test=report.risk_test, note=note
    )
