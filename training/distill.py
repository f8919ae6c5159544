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
import re
import time
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
import torch.nn.functional as F
from pydantic import BaseModel, ConfigDict, Field

from contract.encoder import Encoder
from contract.errors import ConfigError
from contract.query_encoders import SUBDIR, StaticQueryEncoder, variant_folder
from training.data import RetrievalData
from training.losses.info_nce import info_nce_loss
from training.negatives import mine_hard_negatives, no_duplicate_batches

logger = logging.getLogger(__name__)

Variant = Literal["distilled", "static"]


class DistillConfig(BaseModel):
    """Every knob of query-encoder distillation; recorded in the manifest with the variants."""

    model_config = ConfigDict(extra="forbid")

    variants: list[Variant] = ["distilled", "static"]
    layers: int = Field(2, ge=1, le=6)  # transformer layers kept by `distilled`
    epochs: int = Field(3, ge=1)
    static_epochs: int = Field(3, ge=1)
    batch_size: int = Field(64, ge=2)
    lr: float = Field(1e-4, gt=0)  # truncated transformer (AdamW)
    static_lr: float = Field(5e-3, gt=0)  # static table (Adam); its rows start near their targets
    match_weight: float = Field(1.0, ge=0)  # 0 = InfoNCE only
    hard_negatives: int = Field(1, ge=0)  # mined per pair from the full model's ranking
    hard_negative_rank_min: int = Field(3, ge=0)
    hard_negative_rank_max: int = Field(50, ge=1)
    hard_negative_margin: float = Field(0.05, ge=0)
    title_queries: int = Field(5000, ge=0)  # documents whose title becomes a pseudo-query
    sentence_queries: int = Field(5000, ge=0)  # documents one of whose sentences becomes a pseudo-query
    max_seq_length: int = Field(64, ge=8, le=512)  # while training the transformer; queries are short
    sif_a: float = Field(1e-3, gt=0)  # SIF weight a/(a+p(token)) of the static initialisation
    # "full": every vocabulary token through the model (model2vec); "seen": only tokens of the corpus and
    # the training texts (the others start at zero), ~10x less work: for tests and quick runs
    static_init_vocab: Literal["full", "seen"] = "full"
    max_steps: int | None = Field(None, ge=1)  # per variant; tests and smoke runs
    seed: int = 0


@dataclass
class DistillPairs:
    texts: list[str]  # queries and pseudo-queries
    positives: list[int]  # corpus position of each text's positive
    keys: list[str]  # query id (pseudo: "title:<doc>", "sentence:<doc>")
    known: dict[Hashable, set[Hashable]]  # every labelled positive (corpus position) of each key


_SENTENCE = re.compile(r"(?<=[.!?])\s+")


def distill_pairs(
    train: RetrievalData, doc_ids: Sequence[str], config: DistillConfig, rng: np.random.Generator
) -> DistillPairs:
    """Training queries (one pair per relevant document in the index) plus titles and sentences."""
    position = {d: i for i, d in enumerate(doc_ids)}
    pairs = DistillPairs([], [], [], {})

    def add(key: str, text: str, doc: str) -> None:
        if text.strip() and doc in position:
            pairs.texts.append(text.strip())
            pairs.positives.append(position[doc])
            pairs.keys.append(key)
            pairs.known.setdefault(key, set()).add(position[doc])

    for qid in sorted(train.qrels):
        for did in sorted(train.qrels[qid]):
            add(qid, train.queries.get(qid, ""), did)
    docs = [d for d in train.corpus.values() if d.id in position]
    for doc in _pick(docs, config.title_queries, rng):
        add(f"title:{doc.id}", doc.title, doc.id)
    for doc in _pick(docs, config.sentence_queries, rng):
        sentences = [s for s in _SENTENCE.split(doc.text) if 4 <= len(s.split()) <= 40]
        if sentences:
            add(f"sentence:{doc.id}", sentences[int(rng.integers(len(sentences)))], doc.id)
    n_queries = sum(1 for k in pairs.keys if ":" not in k)
    logger.info(
        "distillation pairs: %d from queries, %d pseudo-queries", n_queries, len(pairs.texts) - n_queries
    )
    return pairs


def _pick(docs: list[Any], n: int, rng: np.random.Generator) -> list[Any]:
    if n >= len(docs):
        return docs
    return [docs[int(i)] for i in sorted(rng.choice(len(docs), size=n, replace=False))]


def _student_loss(
    student_q: torch.Tensor,
    teacher_q: torch.Tensor,
    docs: torch.Tensor,
    extra: torch.Tensor | None,
    *,
    temperature: float,
    match_weight: float,
) -> torch.Tensor:
    """InfoNCE of student queries (B, D) against fixed docs (B, D) + extra (M, D); plus the matching term."""
    loss = info_nce_loss(student_q, docs, temperature=temperature, extra_docs=extra)
    if match_weight > 0:
        loss = loss + match_weight * (1.0 - F.cosine_similarity(student_q, teacher_q, dim=-1)).mean()
    return loss


def _fit(
    model: Any,
    params: list[torch.nn.Parameter],
    optimizer: torch.optim.Optimizer,
    pairs: DistillPairs,
    doc_emb: np.ndarray,
    teacher_q: np.ndarray,
    negatives: list[list[int]],
    *,
    epochs: int,
    temperature: float,
    config: DistillConfig,
    rng: np.random.Generator,
) -> dict[str, Any]:
    """The readable loop: batches without repeated queries or positives, one InfoNCE step each."""
    from training.train_step import embed, linear_schedule

    batches_per_epoch = [
        no_duplicate_batches(pairs.keys, pairs.positives, config.batch_size, rng, positives=pairs.known)
        for _ in range(epochs)
    ]
    total = sum(len(b) for b in batches_per_epoch)
    if config.max_steps is not None:
        total = min(total, config.max_steps)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: linear_schedule(s, max(1, total // 10), total)
    )
    docs_t, teacher_t = torch.from_numpy(doc_emb), torch.from_numpy(teacher_q)
    model.train()
    step, losses, started = 0, [], time.perf_counter()
    for batches in batches_per_epoch:
        for batch in batches:
            if step >= total:
                break
            extra_pos = sorted({j for i in batch for j in negatives[i]})
            extra = docs_t[extra_pos] if extra_pos else None  # (M, D), fixed
            q = embed(model, [pairs.texts[i] for i in batch])  # (B, D)
            loss = _student_loss(
                q,
                teacher_t[batch],
                docs_t[[pairs.positives[i] for i in batch]],
                extra,
                temperature=temperature,
                match_weight=config.match_weight,
            )
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            optimizer.step()
            scheduler.step()
            losses.append(float(loss.detach()))
            step += 1
            if step % 50 == 0:
                logger.info("step %d/%d loss %.4f", step, total, float(np.mean(losses[-50:])))
    model.eval()
    return {
        "steps": step,
        "seconds": round(time.perf_counter() - started, 1),
        "loss_first": round(float(np.mean(losses[:10])), 4) if losses else None,
        "loss_last": round(float(np.mean(losses[-10:])), 4) if losses else None,
    }


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
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(str(model_dir), device="cpu", local_files_only=True)
    tokenizer = st.tokenizer
    auto: Any = st[0].auto_model
    auto.eval()
    vocab = tokenizer.vocab_size
    counts = np.zeros(vocab, dtype=np.float64)
    for enc in tokenizer(list(corpus_texts), add_special_tokens=False)["input_ids"]:
        np.add.at(counts, enc, 1)
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
    p = counts / max(counts.sum(), 1.0)
    return np.ascontiguousarray(table * (sif_a / (sif_a + p))[:, None], dtype=np.float32)


def train_variant(
    variant: Variant,
    model_dir: Path,
    out_dir: Path,
    pairs: DistillPairs,
    doc_emb: np.ndarray,
    teacher_q: np.ndarray,
    negatives: list[list[int]],
    corpus_texts: Sequence[str],
    *,
    temperature: float,
    config: DistillConfig,
) -> dict[str, Any]:
    """Train one student and save it as a sentence-transformers folder (+ ONNX for `distilled`)."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Normalize, StaticEmbedding
    from tokenizers import Tokenizer

    rng = np.random.default_rng(config.seed)
    torch.manual_seed(config.seed)
    info: dict[str, Any] = {"variant": variant}
    if variant == "distilled":
        model = truncated_student(model_dir, config.layers)
        saved_len = model.max_seq_length
        model.max_seq_length = min(config.max_seq_length, saved_len or config.max_seq_length)
        params = [p for p in model.parameters() if p.requires_grad]
        optimizer: torch.optim.Optimizer = torch.optim.AdamW(params, lr=config.lr, weight_decay=0.01)
        info["layers"] = config.layers
        epochs = config.epochs
    else:
        started = time.perf_counter()
        table = static_init(
            model_dir,
            [*corpus_texts, *pairs.texts],
            sif_a=config.sif_a,
            only_seen=config.static_init_vocab == "seen",
        )
        info["init_seconds"] = round(time.perf_counter() - started, 1)
        tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        tokenizer.no_truncation()
        model = SentenceTransformer(
            modules=[StaticEmbedding(tokenizer, embedding_weights=table), Normalize()]
        )
        params = [p for p in model.parameters() if p.requires_grad]
        optimizer = torch.optim.Adam(params, lr=config.static_lr)
        epochs = config.static_epochs
    info |= _fit(
        model,
        params,
        optimizer,
        pairs,
        doc_emb,
        teacher_q,
        negatives,
        epochs=epochs,
        temperature=temperature,
        config=config,
        rng=rng,
    )
    if variant == "distilled":
        model.max_seq_length = saved_len
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save(str(out_dir), safe_serialization=True)
    if variant == "distilled":
        from training.onnx_export import export_onnx

        export_onnx(out_dir, quantize=False)
    logger.info("trained the %s query encoder in %s s (%d steps)", variant, info["seconds"], info["steps"])
    return info


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
    teacher_q = encoder.encode(pairs.texts, kind="query", batch_size=64)  # (P, D)
    negatives: list[list[int]] = [[] for _ in pairs.texts]
    if config.hard_negatives > 0:
        negatives = mine_hard_negatives(
            teacher_q,
            doc_emb,
            pairs.positives,
            [{int(j) for j in pairs.known[k]} for k in pairs.keys],  # type: ignore[call-overload]
            n=config.hard_negatives,
            rank_min=config.hard_negative_rank_min,
            rank_max=config.hard_negative_rank_max,
            margin=config.hard_negative_margin,
            rng=rng,
        )
    from contract.encoder import document_text

    corpus_texts = [document_text(d.title, d.text) for d in train.corpus.values()]
    temperature = float(encoder.similarity.temperature or 0.05)
    out: dict[str, dict[str, Any]] = {}
    for variant in config.variants:
        out[variant] = train_variant(
            variant,
            model_dir,
            out_root / variant,
            pairs,
            np.ascontiguousarray(doc_emb, dtype=np.float32),
            teacher_q,
            negatives,
            corpus_texts,
            temperature=temperature,
            config=config,
        )
        out[variant] |= {"n_pairs": len(pairs.texts), "temperature": temperature}
    return out


__all__ = ["SUBDIR", "DistillConfig", "StaticQueryEncoder", "distill_query_encoders", "variant_folder"]
