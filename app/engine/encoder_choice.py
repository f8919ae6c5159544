"""Which query encoder serves a bundle: loading one by backend name, and `auto`'s timed choice.

Backends: `torch` (the bundle's model), `onnx` / `onnx-int8` (its ONNX export), `distilled` (a truncated
transformer trained into the same document space, ONNX) and `static` (a StaticEmbedding table); the last
two exist only in bundles built with distillation (`training.distill.bundle_step`).

`auto` takes every backend the bundle has whose nDCG@10 loss vs the full model, recorded in the manifest
on the evaluation split, is within `max_ndcg_loss` (torch always qualifies: it *is* the full model), loads
each, times it on this machine and serves the fastest. Timed, not assumed: on a CPU without VNNI the int8
export is no faster than fp32 (bench/serving/load_bench.py prints both), and which is faster depends on the
machine. Each candidate encodes the recorded evaluation queries one at a time (the latency a lone client
sees), after a warm-up. The choice must not flip with the machine's load at start-up (issue 42: one bundle
served int8 on a quiet start and static-routed on a busy one), so the candidates are timed interleaved —
TIMING_ROUNDS rounds, each one pass of every candidate in a rotated order, so a burst of load costs one
pass of each rather than every pass of one — and each keeps its fastest pass. Candidates within TIE_BAND
of the fastest are a tie, which the smaller recorded nDCG@10 loss breaks: a near-tie is exactly what load
flips, and the more accurate encoder is the better side to land on. The choice, its timings and how sure it
is (rounds the chosen one won, the runner-up's ratio) show in GET /bundles.

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

import numpy as np

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
TIMING_ROUNDS = (
    5  # interleaved passes per candidate; each keeps its fastest (bench/serving/auto_stability.py)
)
# candidates this close to the fastest are a tie (the smaller nDCG loss wins); bench/serving/auto_stability.py
# prints how far one candidate's best pass moves between a quiet start and one beside a busy core
TIE_BAND = 0.15


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
    """Mean ms per query encoded alone, the best of TIMING_ROUNDS passes after a warm-up."""
    return time_interleaved({"one": encoder}, queries)["one"]["ms_per_query"]


def time_interleaved(
    encoders: dict[str, Any], queries: list[str], rounds: int = TIMING_ROUNDS
) -> dict[str, dict[str, Any]]:
    """{name: {ms_per_query (its fastest pass), median_ms, wins (rounds it was the fastest)}}.

    Every round times one pass of each encoder over `queries`, one query per call, in an order rotated
    by the round: load that comes and goes hits a pass of each, not all the passes of one."""
    names = list(encoders)
    for name in names:
        for q in queries[:3]:
            encoders[name].encode([q], kind="query", batch_size=1)
    passes: dict[str, list[float]] = {name: [] for name in names}
    wins = dict.fromkeys(names, 0)
    for r in range(rounds):
        this_round: dict[str, float] = {}
        for name in names[r % len(names) :] + names[: r % len(names)]:
            started = time.perf_counter()
            for q in queries:
                encoders[name].encode([q], kind="query", batch_size=1)
            this_round[name] = (time.perf_counter() - started) * 1000 / len(queries)
            passes[name].append(this_round[name])
        wins[min(this_round, key=this_round.__getitem__)] += 1
    return {
        name: {"ms_per_query": min(p), "median_ms": float(np.median(p)), "wins": wins[name]}
        for name, p in passes.items()
    }


def decide(rows: list[dict[str, Any]], tie_band: float = TIE_BAND) -> tuple[str, dict[str, Any]]:
    """(chosen backend, how sure) from timed candidate rows: the fastest, unless others are within
    `tie_band` of it, then the one of those with the smallest nDCG loss (then the fastest)."""
    timed = [c for c in rows if "ms_per_query" in c]
    if not timed:
        return "torch", {"rule": "nothing timed: the full model"}
    fastest = min(c["ms_per_query"] for c in timed)
    tied = [c for c in timed if c["ms_per_query"] <= fastest * (1 + tie_band)]
    chosen = min(tied, key=lambda c: (c["ndcg_loss"] or 0.0, c["ms_per_query"]))
    others = sorted((c for c in timed if c is not chosen), key=lambda c: c["ms_per_query"])
    certainty: dict[str, Any] = {
        "rounds": TIMING_ROUNDS,
        "wins": chosen.get("wins"),
        "tie_band": tie_band,
        "tied": sorted(c["backend"] for c in tied),
        "rule": "fastest" if len(tied) == 1 else "tie within the band: the smallest nDCG@10 loss",
    }
    if others:
        runner = others[0]
        certainty |= {
            "runner_up": runner["backend"],
            "runner_up_ratio": round(runner["ms_per_query"] / chosen["ms_per_query"], 3),
        }
    return chosen["backend"], certainty


def _timing_queries(bundle: Bundle, fallback_query: str = "a query") -> list[str]:
    return timing_queries(bundle.manifest.extras)[:MAX_TIMING_QUERIES] or [fallback_query]


def fastest_full_backend(
    bundle: Bundle, *, max_ndcg_loss: float, threads: int = 0, timed: dict[str, float] | None = None
) -> tuple[str, Any]:
    """The fastest full-model backend (torch, onnx, onnx-int8) within `max_ndcg_loss` (`decide`'s rule),
    and it loaded; `timed`: ms per query already measured (auto's candidates), else they are timed here."""
    losses = recorded_ndcg_losses(bundle)
    loaded: dict[str, Any] = {}
    for name in FULL_BACKENDS:
        if name in losses and losses[name] <= max_ndcg_loss:
            try:
                loaded[name] = load_encoder_backend(bundle, name, threads=threads)
            except ModelLoadError:
                continue
    if timed is None or not set(loaded) <= set(timed):
        timed = {n: t["ms_per_query"] for n, t in time_interleaved(loaded, _timing_queries(bundle)).items()}
    rows = [{"backend": n, "ndcg_loss": losses[n], "ms_per_query": timed[n]} for n in loaded]
    name, _ = decide(rows)  # torch is always within any budget, so never empty
    return name, loaded[name]


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
    candidates, loaded = _plain_candidates(bundle, max_ndcg_loss, threads)
    _time_rows(candidates, loaded, queries)
    if routing:
        routed = _routed_candidates(bundle, candidates, loaded, max_ndcg_loss, threads)
        candidates += routed
        if any(c["backend"] in loaded for c in routed):  # timed again beside the others, interleaved
            _time_rows(candidates, loaded, queries)
    chosen, certainty = decide(candidates)
    encoder = loaded.get(chosen) or load_encoder_backend(bundle, "torch", threads=threads)
    record = {
        "chosen": chosen,
        "max_ndcg_loss": max_ndcg_loss,
        "timed_queries": len(queries),
        "certainty": certainty,
        "candidates": candidates,
    }
    logger.info(
        "auto query encoder for %s: %s (%s; %s)",
        bundle.version,
        chosen,
        ", ".join(f"{c['backend']} {c.get('ms_per_query', '-')} ms" for c in candidates),
        certainty["rule"],
    )
    routed_row = next((c for c in candidates if c["backend"] == chosen and "routing" in c), None)
    if routed_row is not None:
        record["routing"] = routed_row["routing"]
    return chosen, encoder, record


def _plain_candidates(
    bundle: Bundle, max_ndcg_loss: float, threads: int
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """A row per backend the bundle carries (its loss, eligible or not), and the eligible ones loaded."""
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
            except ModelLoadError as exc:  # a damaged optional encoder must not stop the bundle
                row |= {"eligible": False, "error": str(exc)}
                logger.warning("bundle %s: %s not usable: %s", bundle.version, encoder_backend, exc)
        candidates.append(row)
    return candidates, loaded


def _time_rows(rows: list[dict[str, Any]], loaded: dict[str, Any], queries: list[str]) -> None:
    """Every loaded candidate timed, interleaved with the others; its row gets the timings."""
    names = [c["backend"] for c in rows if c["backend"] in loaded]
    timings = time_interleaved({n: loaded[n] for n in names}, queries)
    for row in rows:
        if row["backend"] in timings:
            t = timings[row["backend"]]
            row |= {
                "ms_per_query": round(t["ms_per_query"], 4),
                "median_ms": round(t["median_ms"], 4),
                "wins": t["wins"],
            }


def _routed_candidates(
    bundle: Bundle,
    candidates: list[dict[str, Any]],
    loaded: dict[str, Any],
    max_ndcg_loss: float,
    threads: int,
) -> list[dict[str, Any]]:
    """A routed row per distilled variant that is over the budget alone but routed within it (loaded into
    `loaded`; timed by the caller). Its fallback is the full-model backend `decide` takes among those timed."""
    rows = []
    full_rows = [c for c in candidates if c["backend"] in FULL_BACKENDS and "ms_per_query" in c]
    for variant in DISTILLED_BACKENDS:
        own = next((c for c in candidates if c["backend"] == variant), None)
        routing = routing_record(bundle.manifest.extras, variant)
        if own is None or own["eligible"] or routing is None or not full_rows:
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
            fast, _ = decide(full_rows)
            loaded[name], row["routing"] = routed_encoder(
                bundle, name, max_ndcg_loss=max_ndcg_loss, threads=threads, fallback=(fast, loaded[fast])
            )
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
