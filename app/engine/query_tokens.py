"""Each request text is tokenised once: the ids that set its token budget are the ids the model encodes.

A request's texts are tokenised on the request's thread, before it queues, to count its tokens (the
budget's 422 and the fair slices of app/engine/token_slicing.py). The same ids then travel with the
request (`SearchSpec.token_ids`, `EmbedSpec.token_ids`) to the inference thread, where the bundle's own
model (the torch backend, and documents for /embed) encodes them without tokenising again. The other
query encoders (ONNX, distilled, static) carry their own tokenizer files and tokenise as they encode.

`encode_token_ids` is what `SentenceTransformer.encode` does after tokenising, for this project's text
models (Transformer → Pooling → Normalize, no prompts): batches in descending text-length order (its
order, so the batches and their padding are the same), pad right, forward, L2-normalise. The vectors
equal `Encoder.encode`'s (tests/app/search/test_search.py compares them).
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from contract.encoding.encoder import Encoder

TokenIds = list[list[int]]  # per text: input ids with the special tokens, cut at the model's max length


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

    def __call__(self, texts: Sequence[str]) -> TokenIds:
        """Input ids per text, as the model sees them (its tokenizer, special tokens, its max length)."""
        with self._lock:
            if self._tokenizer is None:
                self._tokenizer = copy.deepcopy(self.model.tokenizer)
            out = self._tokenizer(
                list(texts), add_special_tokens=True, truncation=True, max_length=self.max_length
            )
        return [list(row) for row in out["input_ids"]]


def encode_token_ids(
    encoder: Encoder, texts: Sequence[str], token_ids: Sequence[Sequence[int]], *, batch_size: int
) -> np.ndarray:
    """L2-normalised float32 embeddings (n, dim) of tokenised texts (`texts` only set the batch order)."""
    import torch

    out = np.empty((len(texts), encoder.dim), dtype=np.float32)  # (n, dim)
    model = encoder.model
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
