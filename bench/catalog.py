"""The benches `python -m bench` runs, by name, and their one-line summaries.

A name is the old script's name (bench/NAME.py before the package), so a recorded command keeps its
meaning: `python bench/NAME.py ARGS` is now `python -m bench NAME ARGS`. Summaries are read from each
module's docstring with `ast`, so listing imports nothing heavy and runs no bench.
"""

from __future__ import annotations

import ast
import importlib.util

BENCHES: dict[str, str] = {
    # serving: real uvicorn processes or the app in process
    "load_bench": "bench.serving.load_bench",
    "fairness_bench": "bench.serving.fairness_bench",
    "mutation_bench": "bench.serving.mutation_bench",
    "collections_bench": "bench.serving.collections_bench",
    "scaleout": "bench.serving.scaleout",
    "hybrid_latency": "bench.serving.hybrid_latency",
    "hybrid_profile": "bench.serving.hybrid_profile",
    "demo_bench": "bench.serving.demo_bench",
    "txtai_peer": "bench.serving.txtai_peer",
    "auto_stability": "bench.serving.auto_stability",
    "request_profile": "bench.serving.request_profile",
    "request_ab": "bench.serving.request_ab",
    "thread_cpu": "bench.serving.thread_cpu",
    # processes: how the API's worker processes share the machine
    "worker_balance": "bench.processes.worker_balance",
    "spare_cores": "bench.processes.spare_cores",
    # index
    "index_bench": "bench.index.index_bench",
    "milvus_bench": "bench.index.milvus_bench",
    "milvus_scale": "bench.index.milvus_scale",
    "corpus_encode_bench": "bench.index.corpus_encode_bench",
    "corpus_encode_scale": "bench.index.corpus_encode_scale",
    "corpus_encode_gpu": "bench.index.corpus_encode_gpu",
    "onnx_batch_tokens": "bench.index.onnx_batch_tokens",
    "onnx_query_runs": "bench.index.onnx_query_runs",
    "hybrid_scifact": "bench.index.hybrid_scifact",
    "scrub_bench": "bench.index.scrub_bench",
    "flat_batch_threshold": "bench.index.flat_batch_threshold",
    "flat_search_threads": "bench.index.flat_search_threads",
    "half_scan": "bench.index.half_scan",
    # training
    "device_bench": "bench.training.device_bench",
    "train_scifact": "bench.training.train_scifact",
    "train_step_cost": "bench.training.train_step_cost",
    "train_step_gpu": "bench.training.train_step_gpu",
    "step_breakdown": "bench.training.step_breakdown",
    "freeze_cost": "bench.training.freeze_cost",
    "recipe_search": "bench.training.recipe_search",
    "recipe_cost": "bench.training.recipe_cost",
    "retrain_scale": "bench.training.retrain_scale",
    "packages_corpus": "bench.training.packages_corpus",
    "scifact_checks": "bench.training.scifact_checks",
    "query_retrain_search": "bench.training.query_retrain_search",
    "worker_memory": "bench.training.worker_memory",
    # distillation of the query encoders
    "distill_scifact": "bench.distill.distill_scifact",
    "distill_search": "bench.distill.distill_search",
    "distill_corpora": "bench.distill.distill_corpora",
    # the gap report
    "gap_validation": "bench.gap.gap_validation",
    "predictive_validity": "bench.gap.predictive_validity",
    "live_feedback": "bench.gap.live_feedback",
    "feedback_retrain": "bench.gap.feedback_retrain",
    "aninfonce_synthetic": "bench.gap.aninfonce_synthetic",
}


def summary(name: str) -> str:
    """The first sentence-paragraph of the bench's docstring (one line), read without importing it."""
    spec = importlib.util.find_spec(BENCHES[name])
    if spec is None or spec.origin is None:
        raise LookupError(f"bench {name!r}: module {BENCHES[name]} not found")
    with open(spec.origin, encoding="utf-8") as f:
        doc = ast.get_docstring(ast.parse(f.read())) or ""
    return " ".join(doc.split("\n\n", 1)[0].split())
