"""Distilled query encoders as served: loading them from a bundle and reading their recorded quality.

A bundle may carry cheaper *query-side* encoders trained into the document space of its own model
(`training.distill.students_fit` writes them): documents stay encoded by the full model, only queries change.

- `distilled`: the first layers of the model, fine-tuned, served through ONNX like the full model's
  export (`OnnxQueryEncoder`, fp32).
- `static`: a sentence-transformers `StaticEmbedding` (one vector per token, mean-pooled, normalised).
  Serving needs no model runtime: tokenize, average rows of a (vocab, dim) matrix, normalise. That is
  numpy work of a few microseconds, so this module serves it with numpy instead of torch.

The manifest's `extras["query_encoders"]` records, per variant, its folder and its nDCG@10 / recall@10 on
the evaluation split against the full encoder, measured through the bundle's own index.

Contract module for the API: imports only numpy, tokenizers, safetensors and onnxruntime (lazily).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from contract.errors import ModelLoadError

logger = logging.getLogger(__name__)

EXTRAS_KEY = "query_encoders"  # key in the bundle manifest's `extras`
SUBDIR = "query_encoders"  # inside a bundle: query_encoders/<variant>/
VARIANTS = ("distilled", "static")
STATIC_TYPE = "StaticEmbedding"  # class name in modules.json; its "path" holds model.safetensors
STATIC_WEIGHTS = "embedding.weight"  # its EmbeddingBag's tensor in model.safetensors
# (vocab,) uint8 beside a static encoder's modules.json: 1 for the tokens of the texts it was distilled on
SEEN_TOKENS_FILE = "seen_tokens.npy"


class StaticQueryEncoder:
    """Mean of per-token vectors, L2-normalised: what `SentenceTransformer([StaticEmbedding, Normalize])`
    computes, in numpy. Tokenized without special tokens, as `StaticEmbedding.preprocess` does."""

    def __init__(self, table: np.ndarray, tokenizer: Any, *, source: str, seen: np.ndarray | None = None):
        self.table = table  # (vocab, dim) float32
        self.tokenizer = tokenizer
        self.source = source
        self.dim = int(table.shape[1])
        # (vocab,) bool: tokens of the texts the table was distilled on (None: not recorded, older bundles).
        # A token outside them has a row no training touched, so a query holding one is not this table's
        # to answer: `novel` tells the router (issue 44: a written document about a word the corpus lacks
        # ranked 11th by the table, 1st by the full model).
        self.seen = seen

    @classmethod
    def load(cls, folder: str | Path) -> StaticQueryEncoder:
        from safetensors.numpy import load_file
        from tokenizers import Tokenizer

        module = _module_path(Path(folder), STATIC_TYPE)
        weights, tok_file = module / "model.safetensors", module / "tokenizer.json"
        for needed in (weights, tok_file):
            if not needed.exists():
                raise ModelLoadError(f"static query encoder needs {needed}, which does not exist")
        try:
            table = load_file(str(weights))[STATIC_WEIGHTS]
        except KeyError:
            raise ModelLoadError(f"{weights}: no tensor {STATIC_WEIGHTS!r}") from None
        tokenizer = Tokenizer.from_file(str(tok_file))
        tokenizer.no_padding()
        return cls(
            np.ascontiguousarray(table, dtype=np.float32),
            tokenizer,
            source=str(module),
            seen=_seen_tokens(Path(folder) / SEEN_TOKENS_FILE, len(table)),
        )

    def novel(self, token_ids: Sequence[Sequence[int]]) -> np.ndarray:
        """(n,) bool: the queries (ids without special tokens) holding a token the table was not distilled
        on; all False when that was not recorded."""
        if self.seen is None:
            return np.zeros(len(token_ids), dtype=bool)
        return np.array([bool(ids) and not self.seen[list(ids)].all() for ids in token_ids], dtype=bool)

    def novel_texts(self, texts: Sequence[str]) -> np.ndarray:
        """As `novel`, tokenizing `texts` as `encode` does."""
        return self.novel([e.ids for e in self.tokenizer.encode_batch(list(texts), add_special_tokens=False)])

    def novel_ids(self, token_ids: Sequence[Sequence[int]]) -> np.ndarray:
        """As `novel`, from ids with their special tokens (the request's tokenisation, as `encode_ids`)."""
        return self.novel([list(ids[1:-1]) for ids in token_ids])

    def encode(self, texts: Sequence[str], *, kind: str = "query", batch_size: int = 64) -> np.ndarray:
        """float32 (n, dim), L2-normalised rows; a text without tokens gets a zero row (scores 0)."""
        del kind, batch_size
        return self._pooled(
            [e.ids for e in self.tokenizer.encode_batch(list(texts), add_special_tokens=False)]
        )

    def encode_ids(
        self, texts: Sequence[str], token_ids: Sequence[Sequence[int]], batch_size: int = 64
    ) -> np.ndarray:
        """As `encode`, from ids this tokenizer gave *with* its special tokens (the shared tokenisation of
        app/engine/query_tokens.py, uncut): the opening and closing ones are dropped."""
        del texts, batch_size
        return self._pooled([list(ids[1:-1]) for ids in token_ids])

    def _pooled(self, token_ids: Sequence[Sequence[int]]) -> np.ndarray:
        out = np.zeros((len(token_ids), self.dim), dtype=np.float32)
        for i, ids in enumerate(token_ids):
            if ids:
                out[i] = self.table[list(ids)].mean(0)  # (dim,)
        norms = np.linalg.norm(out, axis=1, keepdims=True)  # (n, 1)
        return out / np.maximum(norms, 1e-12)


def _seen_tokens(path: Path, vocab: int) -> np.ndarray | None:
    """The recorded seen-token mask, checked against the table's vocabulary (None when not recorded)."""
    if not path.exists():
        return None
    try:
        seen = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"{path}: not a readable token mask ({exc})") from None
    if seen.shape != (vocab,):
        raise ModelLoadError(f"{path}: {seen.shape} entries for a table of {vocab} tokens")
    return seen.astype(bool)


def _module_path(folder: Path, type_name: str) -> Path:
    """Folder of the first sentence-transformers module of `type_name` (modules.json "path")."""
    import json

    modules_file = folder / "modules.json"
    if not modules_file.exists():
        raise ModelLoadError(f"{folder}: no modules.json; not a sentence-transformers folder")
    for module in json.loads(modules_file.read_text()):
        if str(module.get("type", "")).rsplit(".", 1)[-1] == type_name:
            return folder / str(module.get("path", ""))
    raise ModelLoadError(f"{modules_file}: no {type_name} module")


def variant_folder(bundle_dir: str | Path, variant: str) -> Path:
    return Path(bundle_dir) / SUBDIR / variant


def load_variant(bundle_dir: str | Path, variant: str, *, threads: int = 0) -> Any:
    """The served query encoder of a distilled variant (ModelLoadError when the bundle lacks it)."""
    folder = variant_folder(bundle_dir, variant)
    if variant == "static":
        return StaticQueryEncoder.load(folder)
    if variant == "distilled":
        from contract.encoding.onnx_encoder import OnnxQueryEncoder

        return OnnxQueryEncoder.load(folder, variant="fp32", threads=threads)
    raise ModelLoadError(f"unknown query encoder variant {variant!r} (expected one of {', '.join(VARIANTS)})")


def recorded_losses(extras: Mapping[str, Any] | None, bundle_dir: str | Path) -> dict[str, float]:
    """{variant: nDCG@10 loss vs the full encoder} for the variants recorded and present on disk."""
    record = (extras or {}).get(EXTRAS_KEY) or {}
    out = {}
    for name, info in (record.get("variants") or {}).items():
        loss = info.get("ndcg_loss")
        if name in VARIANTS and loss is not None and variant_folder(bundle_dir, name).is_dir():
            out[name] = float(loss)
    return out


def timing_queries(extras: Mapping[str, Any] | None) -> list[str]:
    """Evaluation queries recorded with the variants, to time encoders on at load time."""
    record = (extras or {}).get(EXTRAS_KEY) or {}
    return [q for q in record.get("timing_queries") or [] if isinstance(q, str)]
