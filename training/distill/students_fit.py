"""Cheap query encoders distilled into the document space of a bundle's model, with InfoNCE.

The documents keep the full model's embeddings, *fixed*; only a query tower is trained, so the index
does not change. The loss is the project's InfoNCE (`info_nce_loss`, the model's own τ) of the student's
query vector against the fixed positive document vector, the other positives of the batch and mined hard
negatives (ranks of the full model's query vector), plus an optional matching term
`match_weight · (1 − cos(student(q), full(q)))` that pulls the student onto the full query encoder
(embedding matching for an asymmetric dual encoder: Kim et al. 2023, EmbedDistill, arXiv 2301.12005).

Two students:
- `distilled`: the first `layers` transformer layers of the model, fine-tuned, exported to ONNX.
- `static`: `StaticEmbedding` initialised model2vec-style (the MinishLab model2vec library): every vocabulary
  token, alone between [CLS] and [SEP], goes through the full model; its mean-pooled, normalised output is
  the token's row, down-weighted by its corpus frequency (SIF weights a/(a+p), Arora et al. 2017, ICLR,
  "A simple but tough-to-beat baseline for sentence embeddings") so that stop-words do not dominate a mean.
  Then fine-tuned with the same loss.

Training text: the split's training queries (one pair per relevant document) plus corpus pseudo-queries,
since queries are few: each document's title and one of its sentences, each paired with its own document.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from contract.encoding.encoder import Encoder
from contract.encoding.query_encoders import SEEN_TOKENS_FILE
from contract.errors import ConfigError
from training.data.retrieval_data import RetrievalData
from training.distill.config import DistillConfig, Variant
from training.distill.loop import DistillTargets, Student, fit_student
from training.distill.pairs import DistillPairs, distill_pairs
from training.distill.students import (
    pca_reduce,
    sif_weighted,
    token_table,
    truncated_student,
    zipf_counts,
)
from training.train.negatives import MiningWindow, mine_hard_negatives

logger = logging.getLogger(__name__)


def distilled_student(model_dir: Path, config: DistillConfig) -> Student:
    model = truncated_student(model_dir, config.layers)
    saved_len = model.max_seq_length
    model.max_seq_length = min(config.max_seq_length, saved_len or config.max_seq_length)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=config.lr, weight_decay=0.01)
    return Student(model, params, optimizer, config.epochs, {"layers": config.layers}, saved_len)


def _static_student(
    model_dir: Path, pairs: DistillPairs, corpus_texts: Sequence[str], config: DistillConfig
) -> Student:
    started = time.perf_counter()
    raw, counts = token_table(
        model_dir, [*corpus_texts, *pairs.texts], only_seen=config.static_init_vocab == "seen"
    )
    info = {"init_seconds": round(time.perf_counter() - started, 1)}
    student = static_student_of(model_dir, raw, counts, config, info)
    student.seen_tokens = counts > 0  # (vocab,)
    return student


def static_student_of(
    model_dir: Path,
    raw_table: np.ndarray,
    counts: np.ndarray,
    config: DistillConfig,
    info: dict[str, Any] | None = None,
) -> Student:
    """A static student over the unweighted token table `raw_table` (vocab, D), with its optimiser.

    `counts` (vocab,) are the corpus counts of the SIF weights (config.static_weighting "corpus"); with
    config.static_pca_dims the table is PCA-reduced first and a linear map (initialised with the
    principal axes) takes the pooled vector back to the model's D dimensions.
    """
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    tokenizer.no_truncation()
    if config.static_weighting == "zipf":
        counts = zipf_counts(len(raw_table))
    components = None
    table = raw_table
    if config.static_pca_dims is not None:
        table, components = pca_reduce(raw_table, config.static_pca_dims)  # (vocab, r), (r, D)
    table = sif_weighted(table, counts, config.sif_a)
    model = static_model(tokenizer, table, sparse=config.static_sparse, components=components)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = (torch.optim.SparseAdam if config.static_sparse else torch.optim.Adam)(
        params, lr=config.static_lr
    )
    return Student(model, params, optimizer, config.static_epochs, info or {})


def static_model(
    tokenizer: Any, table: np.ndarray, *, sparse: bool, components: np.ndarray | None = None
) -> Any:
    """StaticEmbedding (+ a linear map with `components` (r, D)) + Normalize; `sparse`: its table gets
    sparse gradients (for `SparseAdam`).

    A batch touches about a thousand of the 30k rows: with sparse gradients (lazy Adam) a step costs
    those rows, not the whole table, 2.6x faster steps on this CPU (measured under load), but on
    scifact's earlier single-query validation carve it scored 0.765 against dense Adam's 0.785
    (bench/distill/distill_search.py; not re-run on the carve of whole query groups).
    """
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Dense, Normalize, StaticEmbedding

    static = StaticEmbedding(tokenizer, embedding_weights=table)
    static.embedding.sparse = sparse
    if components is None:
        return SentenceTransformer(modules=[static, Normalize()])
    r, dim = components.shape
    linear = Dense(
        r,
        dim,
        bias=True,
        activation_function=torch.nn.Identity(),
        init_weight=torch.from_numpy(np.ascontiguousarray(components.T)),  # (D, r): y = x @ components
        init_bias=torch.zeros(dim),
    )
    return SentenceTransformer(modules=[static, linear, Normalize()])


def folded_static(model: Any, tokenizer: Any) -> Any:
    """A static student with a linear map, as one (vocab, D) StaticEmbedding + Normalize: the map is
    affine, so the mean of mapped rows is the map of the mean, and the served numpy encoder (a table)
    gives the same vectors (tests/training/distill/test_distill.py checks it)."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Normalize, StaticEmbedding

    table = model[0].embedding.weight.detach()  # (vocab, r)
    linear = model[1].linear
    full = (table @ linear.weight.detach().T + linear.bias.detach()).numpy()  # (vocab, D)
    return SentenceTransformer(modules=[StaticEmbedding(tokenizer, embedding_weights=full), Normalize()])


def _save_student(variant: Variant, student: Student, out_dir: Path) -> None:
    """A sentence-transformers folder (+ ONNX for `distilled`, at the model's own max_seq_length); a
    static student with a linear map is saved folded into one table (what the API serves)."""
    if variant == "distilled":
        student.model.max_seq_length = student.saved_len
    out_dir.mkdir(parents=True, exist_ok=True)
    model = student.model
    if variant == "static" and len(model) == 3:
        model = folded_static(model, model[0].tokenizer)
    model.save(str(out_dir), safe_serialization=True)
    if student.seen_tokens is not None:
        np.save(out_dir / SEEN_TOKENS_FILE, student.seen_tokens.astype(np.uint8), allow_pickle=False)
    if variant == "distilled":
        from training.export.onnx_export import export_onnx

        export_onnx(out_dir, quantize=False)


def train_variant(
    variant: Variant,
    model_dir: Path,
    out_dir: Path,
    targets: DistillTargets,
    corpus_texts: Sequence[str],
    *,
    temperature: float,
    config: DistillConfig,
) -> dict[str, Any]:
    """Train one student and save it as a sentence-transformers folder (+ ONNX for `distilled`)."""
    rng = np.random.default_rng(config.seed)
    torch.manual_seed(config.seed)
    if variant == "distilled":
        student = distilled_student(model_dir, config)
    else:
        student = _static_student(model_dir, targets.pairs, corpus_texts, config)
    info: dict[str, Any] = {"variant": variant, **student.info}
    info |= fit_student(student, targets, temperature=temperature, config=config, rng=rng)
    _save_student(variant, student, out_dir)
    logger.info("trained the %s query encoder in %s s (%d steps)", variant, info["seconds"], info["steps"])
    return info


def _teacher(encoder: Encoder, model_dir: Path) -> Any:
    """The full query encoder for the teacher vectors: the bundle's ONNX fp32 export when it has one.

    It gives torch's vectors (cosine 1.0000 on scifact, bench/serving/load_bench.py) at about half the cost, and
    tens of thousands of pseudo-queries make this encoding the longest part of distilling a static table.
    """
    from contract.encoding.onnx_encoder import FILES, ONNX_SUBDIR, OnnxQueryEncoder

    if (model_dir / ONNX_SUBDIR / FILES["fp32"]).exists():
        return OnnxQueryEncoder.load(model_dir, variant="fp32")
    return encoder


def pair_negatives(
    teacher_q: np.ndarray,
    doc_emb: np.ndarray,
    pairs: DistillPairs,
    config: DistillConfig,
    rng: np.random.Generator,
) -> list[list[int]]:
    """Per pair, `config.hard_negatives` documents mined from the full model's ranking of its query
    (none when 0), never one of the pair's known positives."""
    if config.hard_negatives == 0:
        return [[] for _ in pairs.texts]
    return mine_hard_negatives(
        teacher_q,  # (P, D)
        doc_emb,  # (N, D)
        pairs.positives,
        [{int(j) for j in pairs.known[k]} for k in pairs.keys],  # type: ignore[call-overload]
        MiningWindow.of(config),
        rng=rng,
    )


def distill_query_encoders(
    encoder: Encoder,
    model_dir: Path,
    out_root: Path,
    train: RetrievalData,
    doc_ids: Sequence[str],
    doc_emb: np.ndarray,
    config: DistillConfig,
) -> dict[str, dict[str, Any]]:
    """Train every configured student into `out_root/<variant>/`; returns {variant: training info}."""
    if encoder.metric != "cosine":
        raise ConfigError("query-encoder distillation supports cosine (InfoNCE) models only, not AnInfoNCE")
    rng = np.random.default_rng(config.seed)
    pairs = distill_pairs(train, doc_ids, config, rng)
    if len(pairs.texts) < 2:
        raise ConfigError("distillation needs at least 2 training pairs (queries or corpus pseudo-queries)")
    teacher_q = _teacher(encoder, model_dir).encode(pairs.texts, kind="query", batch_size=64)  # (P, D)
    negatives = pair_negatives(teacher_q, doc_emb, pairs, config, rng)
    from contract.encoding.encoder import document_text

    corpus_texts = [document_text(d.title, d.text) for d in train.corpus.values()]
    temperature = encoder.similarity.logit_divisor()  # cosine: τ, or the default τ when none was recorded
    out: dict[str, dict[str, Any]] = {}
    targets = DistillTargets(pairs, np.ascontiguousarray(doc_emb, dtype=np.float32), teacher_q, negatives)
    for variant in config.variants:
        out[variant] = train_variant(
            variant,
            model_dir,
            out_root / variant,
            targets,
            corpus_texts,
            temperature=temperature,
            config=config,
        )
        out[variant] |= {"n_pairs": len(pairs.texts), "temperature": temperature}
    return out
