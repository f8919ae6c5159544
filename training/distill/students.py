"""The two students' starting points: a truncated copy of the model, and a model2vec-style static table.

`static_init` follows the MinishLab model2vec library: every vocabulary token, alone between [CLS] and
[SEP], goes through the full model; its mean-pooled, normalised output is the token's row, down-weighted
by its corpus frequency (SIF weights a/(a+p), Arora et al. 2017, ICLR). model2vec's two other steps are
options here: p(token) from Zipf's law over the vocabulary order instead of corpus counts
(`zipf_counts`), and PCA of the token vectors (`pca_reduce`: centred, reduced), for which the student
learns a linear map back to the model's space since its queries must land among the full model's documents.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from contract.errors import ConfigError


def truncated_student(model_dir: str | Path, layers: int) -> Any:
    """The model's sentence-transformers pipeline with only its first `layers` transformer layers."""
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(str(model_dir), device="cpu", local_files_only=True)
    auto: Any = st[0].auto_model
    total = len(auto.encoder.layer)
    if layers >= total:
        raise ConfigError(f"--distill-layers {layers}: the model has only {total} layers")
    auto.encoder.layer = auto.encoder.layer[:layers]
    auto.config.num_hidden_layers = layers
    # the token embeddings stay the full model's: a third of the parameters, and a query word the
    # training texts never contain keeps the vector the full model would have started from
    auto.embeddings.requires_grad_(False)
    return st


def static_init(
    model_dir: str | Path, corpus_texts: Sequence[str], *, sif_a: float, only_seen: bool = False
) -> np.ndarray:
    """(vocab, dim) rows: each token through the full model alone, SIF-weighted by corpus frequency.

    `only_seen`: only tokens that occur in `corpus_texts` are computed; the other rows stay zero.
    """
    table, counts = token_table(model_dir, corpus_texts, only_seen=only_seen)
    return sif_weighted(table, counts, sif_a)


def token_table(
    model_dir: str | Path, corpus_texts: Sequence[str], *, only_seen: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """(vocab, dim) unweighted token rows (each token through the full model alone) and the corpus
    counts (vocab,); `only_seen`: rows of tokens absent from `corpus_texts` stay zero, uncomputed."""
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(str(model_dir), device="cpu", local_files_only=True)
    tokenizer = st.tokenizer
    auto: Any = st[0].auto_model
    auto.eval()
    vocab = tokenizer.vocab_size
    counts = token_counts(tokenizer, corpus_texts)
    ids = torch.from_numpy(np.nonzero(counts)[0]) if only_seen else torch.arange(vocab)
    cls, sep = tokenizer.cls_token_id, tokenizer.sep_token_id
    table = np.zeros((vocab, auto.config.hidden_size), dtype=np.float32)
    with torch.inference_mode():
        for start in range(0, len(ids), 1024):
            chunk = ids[start : start + 1024]
            input_ids = torch.stack(
                [torch.full_like(chunk, cls), chunk, torch.full_like(chunk, sep)], 1
            )  # (c, 3)
            hidden = auto(input_ids=input_ids, attention_mask=torch.ones_like(input_ids)).last_hidden_state
            # mean pooling over the 3 positions, normalised: the model's own sentence vector of the token
            table[chunk.numpy()] = F.normalize(hidden.mean(1), dim=-1).numpy()  # (c, D)
    return table, counts


def token_counts(tokenizer: Any, texts: Sequence[str]) -> np.ndarray:
    """(vocab,) occurrences of each token id in `texts`, special tokens left out."""
    counts = np.zeros(tokenizer.vocab_size, dtype=np.float64)
    if not texts:  # the tokenizer refuses an empty batch
        return counts
    # verbose=False: counting whole documents, longer than the model's 512 tokens by design, is not an input
    # the model will see; the tokenizer's "sequence length is longer than…" warning was noise in the demo log
    for enc in tokenizer(list(texts), add_special_tokens=False, verbose=False)["input_ids"]:
        np.add.at(counts, enc, 1)
    return counts


def sif_weighted(table: np.ndarray, counts: np.ndarray, sif_a: float) -> np.ndarray:
    """Rows of `table` (vocab, D) scaled by SIF's a / (a + p(token)), p from `counts` (vocab,)."""
    p = counts / max(counts.sum(), 1.0)
    return np.ascontiguousarray(table * (sif_a / (sif_a + p))[:, None], dtype=np.float32)


def zipf_counts(vocab_size: int) -> np.ndarray:
    """(vocab,) pseudo-counts p(token id i) ∝ 1/(i + 2): model2vec's corpus-free SIF probabilities, which
    take the tokenizer's vocabulary order (WordPiece: roughly by frequency) as Zipf rank."""
    return 1.0 / np.arange(2, vocab_size + 2, dtype=np.float64)


def pca_reduce(table: np.ndarray, dims: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows of `table` (vocab, D) centred and projected on their top `dims` principal axes.

    Returns (reduced (vocab, dims), components (dims, D)); all-zero rows (tokens never computed) stay zero
    and take no part in the fit. reduced @ components + mean approximates the table (exactly at dims = D).
    """
    live = np.abs(table).sum(1) > 0  # (vocab,)
    rows = table[live].astype(np.float64)  # (n, D)
    dims = min(dims, rows.shape[1], rows.shape[0])
    mean = rows.mean(0)  # (D,)
    _, _, vt = np.linalg.svd(rows - mean, full_matrices=False)  # vt: (D, D), axes by variance
    components = vt[:dims]  # (dims, D)
    reduced = np.zeros((len(table), dims), dtype=np.float32)
    reduced[live] = ((rows - mean) @ components.T).astype(np.float32)  # (n, dims)
    return reduced, components.astype(np.float32)
