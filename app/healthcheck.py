"""Container healthcheck: `python -m app.healthcheck URL [--timeout SECONDS]`.

Exit 0 when URL answers HTTP 200 within the timeout, 1 otherwise, with one line saying why.

Docker and compose run this every few seconds inside the image, so it uses only the standard library
(urllib): no curl or wget in the image (Qdrant's healthcheck trap, qdrant/qdrant#3491), and no fastapi or
torch import, so one probe costs milliseconds of CPU. `app/__init__.py` must stay empty for the same reason.
"""

from __future__ import annotations

import argparse
import http.client
import sys
import urllib.error
import urllib.request

DEFAULT_URL = "http://127.0.0.1:8000/readyz"
DEFAULT_TIMEOUT = 5.0
_BODY_CHARS = 200  # enough of a 503 body to show the API's reason, short enough for `docker inspect`


def _one_line(text: str) -> str:
    return " ".join(text.split())[:_BODY_CHARS]


def probe(url: str, timeout: float = DEFAULT_TIMEOUT) -> tuple[bool, str]:
    """GET `url` once; return (healthy, one-line reason)."""
    request = urllib.request.Request(url, headers={"User-Agent": "infonce-search-healthcheck"})
    try:
        # urlopen follows redirects; a health URL that redirects is a misconfiguration worth reporting,
        # but following it is harmless and keeps this module small.
        with urllib.request.urlopen(request, timeout=timeout) as response:
            status = response.status
            body = response.read(4096).decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:  # non-2xx status: the server answered, so show its reason
        body = exc.read(4096).decode("utf-8", "replace") if exc.fp is not None else ""
        return False, f"unhealthy: {url} answered HTTP {exc.code}: {_one_line(body) or exc.reason}"
    except TimeoutError:
        return False, f"unhealthy: {url} did not answer within {timeout:g} s"
    except urllib.error.URLError as exc:
        if isinstance(exc.reason, TimeoutError):
            return False, f"unhealthy: {url} did not answer within {timeout:g} s"
        return False, f"unhealthy: cannot reach {url}: {exc.reason}"
    except (ConnectionError, http.client.HTTPException, OSError) as exc:
        return False, f"unhealthy: {url} broke the connection: {exc!r}"
    if status != 200:
        return False, f"unhealthy: {url} answered HTTP {status}: {_one_line(body)}"
    return True, f"healthy: {url} answered HTTP 200: {_one_line(body)}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m app.healthcheck", description=__doc__.splitlines()[0])
    parser.add_argument("url", nargs="?", default=DEFAULT_URL, help=f"URL to GET (default {DEFAULT_URL})")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, help="seconds to wait (default 5)")
    args = parser.parse_args(argv)
    if args.timeout <= 0:
        parser.error("--timeout must be positive")
    healthy, reason = probe(args.url, args.timeout)
    print(reason)  # noqa: T201 - a CLI: docker stores this line in the container's health log
    return 0 if healthy else 1


if __name__ == "__main__":
    sys.exit(main())
