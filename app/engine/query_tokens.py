"""Each request text is tokenised once, whatever encoder serves it: the ids that set its token budget are
the ids every encoder of the request encodes.

A request's texts are tokenised on the request's thread, before it queues, to count its tokens (the
budget's 413 and the fair slices of app/engine/token_slicing.py). The same ids then travel with the
request (`SearchSpec.token_ids`, `EmbedSpec.token_ids`) to the inference thread, where the served query
encoder encodes them without tokenising again: the torch model (`encode_token_ids`), the ONNX and
distilled exports and the static table (their `encode_ids`), and a routed encoder's cheap side and, for
the escalated queries, its full-model side (app/engine/query_routing.py). Those encoders load the model's
own `tokenizer.json`, so their ids are the model's; `shares_tokenizer` checks it at load, and an encoder
whose tokenizer differs is handed the texts instead.

The ids are kept whole (special tokens, no truncation): the static table reads every token (it is served
untruncated), the transformers cut them at their own max length (`truncated`, which is what the
tokenizer's own truncation does to one sequence). The budget counts what the full model sees
(LiveBundle.count_tokens).

`encode_token_ids` is what `SentenceTransformer.encode` does after tokenising, for this project's text
models (Transformer → Pooling → Normalize, no prompts): batches in descending text-length order (its
order, so the batches and their padding are the same), pad right, forward, L2-normalise. The vectors
equal `Encoder.encode`'s (tests/app/search/test_search.py compares them).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from contract.encoding.encoder import Encoder

TokenIds = list[list[int]]  # per text: the model tokenizer's input ids, special tokens included, uncut
# the parts of a tokenizer.json that decide the ids (not its truncation or padding settings)
_ID_PARTS = ("normalizer", "pre_tokenizer", "model", "post_processor", "added_tokens")


def truncated(ids: Sequence[int], max_length: int) -> list[int]:
    """`ids` cut to `max_length` as the tokenizer's own truncation cuts one sequence: the head of the
    text, then its closing special token."""
    if len(ids) <= max_length:
        return list(ids)
    return [*ids[: max_length - 1], ids[-1]]


def tokenizer_identity(tokenizer: Any) -> str:
    """What decides a `tokenizers.Tokenizer`'s ids, as one comparable string."""
    spec = json.loads(tokenizer.to_str())
    return json.dumps({k: spec.get(k) for k in _ID_PARTS}, sort_keys=True)


class QueryTokenizer:
    """The serving model's tokenizer for request threads: a copy, used by one thread at a time.

    A fast tokenizer keeps its padding and truncation mode as state, so sharing the model's own one
    with the inference thread made a concurrent encode fail ("expected sequence of length 18 at dim 1
    (got 10)", tests/app/bundles/test_lifecycle.py's hot swap under load)."""

    def __init__(self, encoder: Encoder):
        self.model = encoder.model  # a SentenceTransformer
        self.max_length = int(self.model.max_seq_length or 512)
        self._tokenizer: Any = None  # copied on first use
        self._lock = threading.Lock()

    def _backend(self) -> Any:
        if self._tokenizer is None:
            from tokenizers import Tokenizer

            tokenizer = Tokenizer.from_str(self.model.tokenizer.backend_tokenizer.to_str())
            tokenizer.no_truncation()
            tokenizer.no_padding()
            self._tokenizer = tokenizer
        return self._tokenizer

    def __call__(self, texts: Sequence[str]) -> TokenIds:
        """Input ids per text: the model's tokenizer with its special tokens, not cut (see module doc)."""
        if not texts:
            return []
        with self._lock:
            out = self._backend().encode_batch(list(texts), add_special_tokens=True)
        return [list(e.ids) for e in out]

    def identity(self) -> str:
        with self._lock:
            return tokenizer_identity(self._backend())


def shares_tokenizer(query_encoder: Any, tokenize: QueryTokenizer) -> bool:
    """Whether `query_encoder` can be handed the model tokenizer's ids: the torch model itself, or
    encoders with `encode_ids` whose every tokenizer decides ids as the model's does."""
    if isinstance(query_encoder, Encoder):
        return query_encoder.model is tokenize.model
    if not hasattr(query_encoder, "encode_ids"):
        return False
    sides = getattr(query_encoder, "sides", None)
    if sides is not None:  # a routed encoder: both of its encoders
        return all(shares_tokenizer(side, tokenize) for side in sides)
    tokenizer = getattr(query_encoder, "tokenizer", None)
    return tokenizer is not None and tokenizer_identity(tokenizer) == tokenize.identity()


def encode_ids(
    query_encoder: Any, texts: Sequence[str], token_ids: Sequence[Sequence[int]], *, batch_size: int
) -> np.ndarray:
    """Normalised float32 (n, dim) vectors of tokenised texts by any query encoder that takes ids."""
    if isinstance(query_encoder, Encoder):
        return encode_token_ids(query_encoder, texts, token_ids, batch_size=batch_size)
    return np.asarray(query_encoder.encode_ids(texts, token_ids, batch_size=batch_size), dtype=np.float32)


def encode_token_ids(
    encoder: Encoder, texts: Sequence[str], token_ids: Sequence[Sequence[int]], *, batch_size: int
) -> np.ndarray:
    """L2-normalised float32 embeddings (n, dim) of tokenised texts (`texts` only set the batch order)."""
    import torch

    out = np.empty((len(texts), encoder.dim), dtype=np.float32)  # (n, dim)
    model = encoder.model
    max_length = int(model.max_seq_length or 512)
    token_ids = [truncated(ids, max_length) for ids in token_ids]
    pad_id = int(model.tokenizer.pad_token_id or 0)
    order = np.argsort([-len(t) for t in texts])  # SentenceTransformer.encode's order, ties included
    model.eval()
    with torch.inference_mode():
        for start in range(0, len(texts), batch_size):
            rows = order[start : start + batch_size]
            width = max(len(token_ids[i]) for i in rows)
            ids = np.full((len(rows), width), pad_id, dtype=np.int64)  # (b, T)
            mask = np.zeros((len(rows), width), dtype=np.int64)  # (b, T)
            for j, i in enumerate(rows):
                ids[j, : len(token_ids[i])] = token_ids[i]
                mask[j, : len(token_ids[i])] = 1
            features = {
                "input_ids": torch.from_numpy(ids).to(model.device),
                "attention_mask": torch.from_numpy(mask).to(model.device),
            }
            emb = model(features)["sentence_embedding"]  # (b, dim)
            out[rows] = torch.nn.functional.normalize(emb, p=2, dim=1).cpu().numpy()
    return out
