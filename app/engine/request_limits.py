"""This server's limits on a request's size, each checked in one place: query characters, tokens, depth.

The schemas (app/schemas/search.py) bound what any server accepts (contract/defaults.py's MAX_QUERY_CHARS,
MAX_DEPTH); the settings (SEARCH_MAX_QUERY_CHARS, SEARCH_MAX_REQUEST_TOKENS, SEARCH_MAX_TOP_K) lower them
for this one. /search and /embed (and the OpenAI-style /v1/embeddings) call these, so a limit and its
message are the same wherever a text comes in. Tokens are counted by the request's one tokenisation
(LiveBundle.prepare_queries, app/engine/query_tokens.py), a cached query by its cache entry.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from app.errors import InvalidInputError, TokenBudgetError


def check_query_chars(texts: Sequence[str], limit: int, where: Callable[[int], str]) -> None:
    """422 naming (`where(i)`) the first text over `limit` characters."""
    long = next((i for i, t in enumerate(texts) if len(t) > limit), None)
    if long is not None:
        raise InvalidInputError(f"body.{where(long)}: longer than this server's limit of {limit} characters")


def check_token_budget(tokens: Sequence[int], limit: int, field: str, what: str) -> None:
    """413 when a request's texts hold more than `limit` tokens in all (`what`: queries or texts)."""
    if sum(tokens) > limit:
        raise TokenBudgetError(
            f"body.{field}: {sum(tokens)} tokens, above this server's budget of "
            f"{limit} per request (send fewer or shorter {what})"
        )


def check_depth(top_k: int, offset: int, limit: int) -> None:
    """422 when a page would reach below rank `limit` (top_k alone, then offset + top_k)."""
    if top_k > limit:
        raise InvalidInputError(f"body.top_k: {top_k} is above this server's limit of {limit}")
    if offset + top_k > limit:
        raise InvalidInputError(
            f"body.offset: offset + top_k is {offset + top_k}, above this server's limit of "
            f"{limit} (the deepest rank a page may reach)"
        )
