"""Typed errors of the client: one class per server `error.code`, falling back on the HTTP status.

Every error answer of the server has the body `{"error": {"code", "message", "details"?}}`; the
exception carries all of it (`status_code`, `code`, `message`, `details`), so callers can branch on a
class (`except QueueFull:` then retry) or on the code string.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from infonce_search.models import JobSummary


class InfonceSearchError(Exception):
    """Base of everything this client raises."""


class ServerUnreachable(InfonceSearchError):
    """No connection to the server (refused, DNS, connect timeout) after the client's retries; `url` is
    the server's base URL, `__cause__` the transport error (httpx.ConnectError / ConnectTimeout)."""

    def __init__(self, url: str, reason: Exception):
        super().__init__(
            f"cannot reach the infonce-search server at {url}: {reason or type(reason).__name__}"
        )
        self.url = url


class ApiError(InfonceSearchError):
    """The server answered an error."""

    def __init__(
        self,
        status_code: int,
        code: str,
        message: str,
        details: list[dict[str, Any]] | None = None,
        retry_after: float | None = None,
    ):
        super().__init__(f"{status_code} {code}: {message}")
        self.status_code = status_code
        self.code = code
        self.message = message
        self.details = details or []
        self.retry_after = retry_after  # seconds, from a Retry-After header when the server sent one


class BadRequest(ApiError):
    """400: e.g. a job names a dataset or model outside the server's roots (dataset_refused)."""


class Unauthorized(ApiError):
    """401 missing_api_key."""


class Forbidden(ApiError):
    """403 forbidden: wrong API key, or the server has none configured."""


class NotFound(ApiError):
    """404: unknown bundle version, job, dataset, document, route, or a bundle without report."""


class Conflict(ApiError):
    """409: activation refused (invalid bundle), a job that already finished, one training job at a time."""


class PayloadTooLarge(ApiError):
    """413 body_too_large."""


class InvalidRequest(ApiError):
    """422 invalid_request: the message (and `details`) name the offending field."""


class ResponseTooLarge(InvalidRequest):
    """422 response_too_large: ask for fewer hits, queries or fields."""


class QueueFull(ApiError):
    """429 queue_full: retry later."""


class ServiceUnavailable(ApiError):
    """503."""


class NoLiveBundle(ServiceUnavailable):
    """503 no_live_bundle: nothing is published (or loaded) yet."""


class NotReady(ServiceUnavailable):
    """503 not_ready: the readiness checks failed."""


class JobFailed(InfonceSearchError):
    """`wait_for_job`: the job ended failed or cancelled; `job` is its last record."""

    def __init__(self, job: JobSummary):
        error = getattr(job, "error", None)
        reason = error or ("cancelled" if job.state == "cancelled" else "no error recorded")
        super().__init__(f"job {job.id} ended {job.state}: {reason}")
        self.job = job


class JobTimeout(InfonceSearchError):
    """`wait_for_job`: the job had not finished when the timeout ran out; `job` is its last record."""

    def __init__(self, job: JobSummary, timeout: float):
        super().__init__(f"job {job.id} still {job.state} after {timeout:g} s")
        self.job = job


BY_CODE: dict[str, type[ApiError]] = {
    "no_live_bundle": NoLiveBundle,
    "not_ready": NotReady,
    "queue_full": QueueFull,
    "missing_api_key": Unauthorized,
    "forbidden": Forbidden,
    "body_too_large": PayloadTooLarge,
    "response_too_large": ResponseTooLarge,
    "invalid_request": InvalidRequest,
}
BY_STATUS: dict[int, type[ApiError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    413: PayloadTooLarge,
    422: InvalidRequest,
    429: QueueFull,
    503: ServiceUnavailable,
}


def error_for(status_code: int, body: Any, retry_after: str | None = None) -> ApiError:
    """The exception for one error answer (any body: a proxy's HTML page still gives a status class)."""
    info = body.get("error") if isinstance(body, dict) else None
    if isinstance(info, dict):
        code, message = str(info.get("code", "error")), str(info.get("message", ""))
        details = info.get("details") if isinstance(info.get("details"), list) else None
    else:
        code, message, details = f"http_{status_code}", str(body)[:500], None
    cls = BY_CODE.get(code) or BY_STATUS.get(status_code, ApiError)
    try:
        after = float(retry_after) if retry_after else None
    except ValueError:  # an HTTP date: the backoff decides instead
        after = None
    return cls(status_code, code, message, details, after)
