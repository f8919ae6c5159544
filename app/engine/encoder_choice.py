"""Which query encoder serves a bundle: loading one by backend name, and `auto`'s timed choice.

Backends: `torch` (the bundle's model), `onnx` / `onnx-int8` (its ONNX export), `distilled` (a truncated
transformer trained into the same document space, ONNX) and `static` (a StaticEmbedding table); the last
two exist only in bundles built with distillation (`training.distill.bundle_step`).

`auto` takes every backend the bundle has whose nDCG@10 loss vs the full model, recorded in the manifest
on the evaluation split, is within `max_ndcg_loss` (torch always qualifies: it *is* the full model), loads
each, times it on this machine and serves the fastest. Timed, not assumed: on a CPU without VNNI the int8
export is no faster than fp32 (bench/serving/load_bench.py prints both), and which is faster depends on the
machine. Each candidate encodes the recorded evaluation queries one at a time (the latency a lone client
sees), after a warm-up; the mean ms per query decides. The choice and its timings show in GET /bundles.

Routed candidates (`static-routed`, `distilled-routed`; app/engine/query_routing.py): a distilled variant
over the budget on its own still qualifies when the bundle's routing curve (contract/encoding/routing.py)
has a share of its least confident queries that, answered by the full model, brings the loss within the
budget. Its fallback is the fastest full-model backend timed here (torch, onnx or onnx-int8 within the
budget); it is then timed like the others. `SEARCH_ROUTING=false` leaves them out.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from app.engine.query_routing import RoutedEncoder
from contract.bundles.bundle import Bundle
from contract.bundles.report_schema import Estimate, GapReport, ServedQueryEncoder
from contract.defaults import MAX_NDCG_LOSS
from contract.encoding.onnx_encoder import EXTRAS_KEY as ONNX_KEY
from contract.encoding.onnx_encoder import FILES, ONNX_SUBDIR, OnnxQueryEncoder, Variant
from contract.encoding.query_encoders import EXTRAS_KEY as QE_KEY
from contract.encoding.query_encoders import load_variant, recorded_losses, timing_queries
from contract.encoding.routing import ROUTED_SUFFIX, operating_point, routing_record
from contract.encoding.shared_models import files_key, shared
from contract.encoding.similarity import temperature_or_default
from contract.errors import ModelLoadError

logger = logging.getLogger(__name__)

ONNX_BACKENDS: dict[str, Variant] = {"onnx": "fp32", "onnx-int8": "int8"}
DISTILLED_BACKENDS = ("distilled", "static")
FULL_BACKENDS = ("torch", "onnx", "onnx-int8")  # the full model itself: routed queries go to one of these
ROUTED_BACKENDS = tuple(f"{v}{ROUTED_SUFFIX}" for v in DISTILLED_BACKENDS)
# texts per encoder call of each side of a routed encoder (app/engine/live_bundle.py's defaults)
_SIDE_BATCH = {"torch": 8, "onnx": 1, "onnx-int8": 1, "distilled": 1, "static": 64}
MAX_TIMING_QUERIES = 32
TIMING_ROUNDS = 2  # best of 2 passes: a pass disturbed by another process's burst should not decide


def load_encoder_backend(
    bundle: Bundle,
    encoder_backend: str,
    *,
    threads: int = 0,
    max_ndcg_loss: float = MAX_NDCG_LOSS,
    route_margin: float | None = None,
) -> Any:
    """The query encoder `encoder_backend` of `bundle` (ModelLoadError when the bundle does not carry it).

    A routed backend takes its threshold from `route_margin`, else from the bundle's curve at
    `max_ndcg_loss`, and the fastest full-model backend within that budget as its fallback."""
    if encoder_backend in ROUTED_BACKENDS:
        encoder, _ = routed_encoder(
            bundle, encoder_backend, max_ndcg_loss=max_ndcg_loss, route_margin=route_margin, threads=threads
        )
        return encoder
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


def _timing_queries(bundle: Bundle, fallback_query: str = "a query") -> list[str]:
    return timing_queries(bundle.manifest.extras)[:MAX_TIMING_QUERIES] or [fallback_query]


def fastest_full_backend(
    bundle: Bundle, *, max_ndcg_loss: float, threads: int = 0, timed: dict[str, float] | None = None
) -> tuple[str, Any]:
    """The fastest full-model backend (torch, onnx, onnx-int8) within `max_ndcg_loss`, and it loaded;
    `timed`: ms per query already measured (auto's candidates), else each is timed here."""
    losses = recorded_ndcg_losses(bundle)
    best: tuple[float, str, Any] | None = None
    for name in FULL_BACKENDS:
        if name not in losses or losses[name] > max_ndcg_loss:
            continue
        try:
            encoder = load_encoder_backend(bundle, name, threads=threads)
        except ModelLoadError:
            continue
        ms = (timed or {}).get(name)
        if ms is None:
            ms = time_encoder(encoder, _timing_queries(bundle))
        if best is None or ms < best[0]:
            best = (ms, name, encoder)
    assert best is not None  # torch is always within any budget
    return best[1], best[2]


def routed_encoder(
    bundle: Bundle,
    encoder_backend: str,
    *,
    max_ndcg_loss: float,
    route_margin: float | None = None,
    threads: int = 0,
    fallback: tuple[str, Any] | None = None,
) -> tuple[RoutedEncoder, dict[str, Any]]:
    """A routed backend of `bundle` and its record (variant, margin, recorded share and loss, fallback).

    ModelLoadError when the bundle lacks the variant or its routing curve, or when no recorded share meets
    the budget and no `route_margin` is given."""
    variant = encoder_backend.removesuffix(ROUTED_SUFFIX)
    routing = routing_record(bundle.manifest.extras, variant)
    if routing is None:
        raise ModelLoadError(f"bundle {bundle.version} records no routing for its {variant} query encoder")
    record: dict[str, Any] = {"variant": variant}
    if route_margin is None:
        point = operating_point(routing, max_ndcg_loss)
        if point is None:
            raise ModelLoadError(
                f"bundle {bundle.version}: no share of {variant}'s queries routed meets nDCG@10 loss "
                f"{max_ndcg_loss}"
            )
        margin = point["margin"]
        record |= {"recorded_share": point["share"], "ndcg_loss": point["ndcg_loss"]}
    else:
        margin = route_margin
        record["margin_from"] = "SEARCH_ROUTE_MARGIN"
    cheap = load_variant(bundle.path, variant, threads=threads)
    name, full = fallback or fastest_full_backend(bundle, max_ndcg_loss=max_ndcg_loss, threads=threads)
    encoder = RoutedEncoder(
        cheap,
        full,
        index=bundle.index,
        to_index_space=bundle.encoder.to_index_space,
        margin=margin,
        cheap_batch=_SIDE_BATCH[variant],
        fallback_batch=_SIDE_BATCH[name],
    )
    record |= {"margin": margin, "fallback": name, "counts": encoder.counts}
    return encoder, record


def choose_encoder_backend(
    bundle: Bundle,
    *,
    max_ndcg_loss: float,
    threads: int = 0,
    fallback_query: str = "a query",
    routing: bool = True,
) -> tuple[str, Any, dict[str, Any]]:
    """(encoder_backend, its loaded encoder, the choice record shown by GET /bundles) for `auto`."""
    queries = _timing_queries(bundle, fallback_query)
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
    if routing:
        candidates += _routed_candidates(bundle, candidates, loaded, queries, max_ndcg_loss, threads)
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
    routed = next((c for c in candidates if c["backend"] == chosen and "routing" in c), None)
    if routed is not None:
        record["routing"] = routed["routing"]
    return chosen, encoder, record


def _routed_candidates(
    bundle: Bundle,
    candidates: list[dict[str, Any]],
    loaded: dict[str, Any],
    queries: list[str],
    max_ndcg_loss: float,
    threads: int,
) -> list[dict[str, Any]]:
    """A routed row per distilled variant that is over the budget alone but routed within it (timed)."""
    rows = []
    timed = {c["backend"]: c["ms_per_query"] for c in candidates if "ms_per_query" in c}
    for variant in DISTILLED_BACKENDS:
        own = next((c for c in candidates if c["backend"] == variant), None)
        routing = routing_record(bundle.manifest.extras, variant)
        if own is None or own["eligible"] or routing is None:
            continue  # absent, already eligible alone (routing would only add work), or no curve
        point = operating_point(routing, max_ndcg_loss)
        name = f"{variant}{ROUTED_SUFFIX}"
        if point is None:
            rows.append({"backend": name, "ndcg_loss": None, "eligible": False})
            continue
        row: dict[str, Any] = {
            "backend": name,
            "ndcg_loss": point["ndcg_loss"],
            "eligible": True,
            "route_share": point["share"],
        }
        try:
            fast = min((b for b in FULL_BACKENDS if b in timed), key=timed.__getitem__)
            loaded[name], row["routing"] = routed_encoder(
                bundle, name, max_ndcg_loss=max_ndcg_loss, threads=threads, fallback=(fast, loaded[fast])
            )
            row["ms_per_query"] = round(time_encoder(loaded[name], queries), 4)
        except ModelLoadError as exc:
            row |= {"eligible": False, "error": str(exc)}
            logger.warning("bundle %s: %s not usable: %s", bundle.version, name, exc)
        rows.append(row)
    return rows


def served_section(bundle: Bundle, encoder_backend: str, report: GapReport) -> ServedQueryEncoder:
    """The gap report's `served_query_encoder`: the served encoder's risk at the report's k and τ."""
    tau = temperature_or_default(report.model.logit_temperature)
    if encoder_backend in ROUTED_BACKENDS:
        return ServedQueryEncoder(
            backend=encoder_backend,
            k=report.k,
            temperature=tau,
            note="routed: the distilled encoder's vectors for confident queries, the full model's for the "
            "rest; the risk of that mixture was not measured (its nDCG@10 loss is in GET /bundles)",
        )
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
