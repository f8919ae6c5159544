"""Base-vs-tuned metrics in every retrieval mode (dense, lexical, hybrid) for the training run's
metrics.json: the fusion is tuned on the validation carve for each model (as the index step will), then
the evaluation split is scored once per mode. BM25 is built in memory over the evaluation corpus."""

from __future__ import annotations

from typing import Any

from contract.encoding.encoder import Encoder, document_text
from contract.index.fusion import DEFAULT_DEPTH, MODES, FusionParams
from contract.index.lexical_index import LexicalIndex
from training.data.retrieval_data import RetrievalData
from training.hybrid.bm25_build import lexical_index
from training.hybrid.fusion_tuning import metrics_of, runs_for_mode, tune
from training.hybrid.lexical_step import mode_runs


class ModeScorer:
    def __init__(self, eval_data: RetrievalData, validation: RetrievalData, depth: int = DEFAULT_DEPTH):
        self.eval_data, self.depth = eval_data, depth
        self.doc_ids = list(eval_data.corpus)
        # tuning needs the validation queries ranked over the same corpus (BEIR folders; not pairs files)
        self.validation = (
            validation if validation.queries and list(validation.corpus) == self.doc_ids else None
        )
        texts = [document_text(d.title, d.text) for d in eval_data.corpus.values()]
        self.lexical: LexicalIndex = lexical_index(texts)

    def score(self, encoder: Encoder, doc_emb: Any) -> dict[str, Any]:
        """{"default_mode", "fusion", "validation" (every candidate) or None, mode: metrics...}."""
        if self.validation is not None:
            q = encoder.encode(list(self.validation.queries.values()), kind="query")  # (n_val, dim)
            dense, lexical = mode_runs(self.validation, q, doc_emb, encoder, self.lexical, self.depth)
            record = tune(dense, lexical, self.validation.qrels, self.doc_ids, depth=self.depth)
        else:
            record = {
                "default_mode": "dense",
                "fusion": FusionParams(depth=self.depth).record(),
                "validation": None,
            }
        params = FusionParams.from_record(record["fusion"])
        q = encoder.encode(list(self.eval_data.queries.values()), kind="query")  # (n_eval, dim)
        dense, lexical = mode_runs(self.eval_data, q, doc_emb, encoder, self.lexical, self.depth)
        for mode in MODES:
            record[mode] = metrics_of(
                runs_for_mode(mode, dense, lexical, params), self.eval_data.qrels, self.doc_ids
            )
        return record
