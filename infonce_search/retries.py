"""Retries with backoff on what a later try can fix: 429 queue_full, 503 (nothing live yet, not ready, a
mutation log that cannot be written: nothing was done) and a server that could not be reached.

tenacity (kept library, chosen over stamina: stamina is a thin layer over tenacity itself, and tenacity
is already what langchain-core and llama-index-core depend on, so the integrations add nothing). Waits are
exponential with jitter (`initial` · 2ⁿ, at most `max_wait`), or the server's Retry-After when it sends
one. Every request is retried, writes too: a 429 or 503 answer means nothing was applied
(docs: "Nothing was written"), and a refused connection sent nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

import tenacity

from infonce_search.errors import ApiError, QueueFull, ServerUnreachable, ServiceUnavailable

RETRYABLE = (QueueFull, ServiceUnavailable, ServerUnreachable)


@dataclass(frozen=True)
class RetryPolicy:
    """`attempts`: tries in all (1 = no retry); `initial`, `max_wait`: the backoff, in seconds."""

    attempts: int = 4
    initial: float = 0.25
    max_wait: float = 8.0

    def _wait(self, state: tenacity.RetryCallState) -> float:
        error = state.outcome.exception() if state.outcome else None
        if isinstance(error, ApiError) and error.retry_after is not None:
            return min(max(error.retry_after, 0.0), self.max_wait)
        return float(tenacity.wait_exponential_jitter(initial=self.initial, max=self.max_wait)(state))

    def _options(self) -> dict[str, object]:
        return {
            "stop": tenacity.stop_after_attempt(max(1, self.attempts)),
            "wait": self._wait,
            "retry": tenacity.retry_if_exception_type(RETRYABLE),
            "reraise": True,  # the last error itself (QueueFull, ServerUnreachable, …), not a RetryError
        }

    def retrying(self) -> tenacity.Retrying:
        return tenacity.Retrying(**self._options())  # type: ignore[arg-type]

    def async_retrying(self) -> tenacity.AsyncRetrying:
        return tenacity.AsyncRetrying(**self._options())  # type: ignore[arg-type]


NO_RETRY = RetryPolicy(attempts=1)
