"""Folding the mutation log into a corpus: last write per id wins, only changed documents are encoded."""

from __future__ import annotations

import numpy as np

from contract.encoding.encoder import document_text
from contract.mutations.log import MutationLog, NewDocument
from training.data.retrieval_data import Document
from training.publish.mutation_fold import fold_log


def test_fold_applies_the_log_up_to_its_head(tmp_path, shared_encoder):
    corpus = {i: Document(i, "", f"document number {i}", {"n": n}) for n, i in enumerate("abcd")}
    emb = shared_encoder.encode([document_text("", d.text) for d in corpus.values()], kind="document")
    assert fold_log(tmp_path, corpus, emb, shared_encoder).seq == 0  # no log: unchanged, seq 0
    log = MutationLog(tmp_path)
    log.append_upserts(
        [NewDocument("b", "B", "replaced text", {"n": 9}), NewDocument("e", "", "new one", {})], None, None
    )
    log.append_deletes(["c", "e", "zz"])
    log.append_upserts([NewDocument("e", "", "new again", {"x": 1})], None, None)
    folded = fold_log(tmp_path, corpus, emb, shared_encoder)
    assert folded.seq == 6 and (folded.upserted, folded.deleted) == (2, 1)
    assert list(folded.corpus) == ["a", "d", "b", "e"]
    assert folded.corpus["b"].text == "replaced text" and folded.corpus["b"].metadata == {"n": 9}
    assert folded.corpus["e"].text == "new again"
    assert np.array_equal(folded.embeddings[:2], emb[[0, 3]])  # unchanged documents are not re-encoded
    fresh = shared_encoder.encode([document_text("B", "replaced text"), "new again"], kind="document")
    assert np.allclose(folded.embeddings[2:], fresh, atol=1e-5)
