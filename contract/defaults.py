"""The project's defaults that more than one module needs: each is defined here once, and every signature,
Settings field and CLI option that offers it as a default reads it from here (tests/project/test_defaults_once.py
greps the code for the literals). Standard library only: app/settings.py, the contract and training all
import it without pulling anything else in.

A default that only one module uses stays in that module, beside the code it tunes.
"""

from __future__ import annotations

from typing import Final

# --- publication (the bundle store and its quality gate) ---
KEEP_VERSIONS: Final = 5
"""Bundle versions a store keeps (the live one, its rollback target and candidates); older ones are pruned."""

GATE_METRIC: Final = "ndcg@10"
"""The held-out metric the quality gate compares a candidate with the live version on."""

GATE_TOLERANCE: Final = 0.005
"""How far below the live version's GATE_METRIC a candidate may score and still go live."""

# --- the index ---
TARGET_RECALL: Final = 0.95
"""ANN recall@10 against exact search that an approximate index's search parameter is tuned to."""

# --- query encoders ---
MAX_NDCG_LOSS: Final = 0.005
"""Largest nDCG@10 loss against the full model for a faster encoder (ONNX, int8, static, routed) to be
chosen by `auto`, on the serving side (Settings.max_ndcg_loss) and for the corpus encode alike."""

# --- the search API's hard limits (each server's SEARCH_MAX_* setting may only lower them) ---
MAX_QUERY_CHARS: Final = 2048
"""Longest query text any server accepts, in characters (Settings.max_query_chars, the request schema)."""

MAX_DEPTH: Final = 1000
"""The deepest rank (offset + top_k) any server answers (Settings.max_top_k, the request schema)."""

# --- collections ---
DEFAULT_COLLECTION: Final = "default"
"""The collection a request without a collection addresses (and the folder a single-collection store uses)."""

# --- relevance feedback ---
FEEDBACK_HOLDOUT: Final = 0.2
"""Share of the judged queries a retrain holds out of training to evaluate (and gate) on, by query and
seeded: 1 in 5, the usual 80/20 of a BEIR dev/test carve, leaves the bulk for training while 20 judged
queries (the live section's minimum) already give 4 held-out queries."""
