"""The `search_id` of a /search answer: what it showed (collection, version, mode, ranked ids, time), signed.

The server verifies an id without keeping every answer: the id carries its own content, and an HMAC-SHA256
over it (RFC 2104) under a secret of the bundles folder proves this server made it. A judgment then records
the version, mode and the judged document's rank from the id, not from what a client claims.

    search_id = base64url(json payload) "." base64url(hmac(secret, payload))

The secret is `<bundles>/feedback.secret`, 32 random bytes made once (atomic write, mode 0600): every
replica on one bundles folder shares it, so an id made by one verifies on another.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
import json
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

from contract.errors import InvalidQuery

SECRET_FILE = "feedback.secret"
SECRET_BYTES = 32


class SearchIdError(InvalidQuery):
    """A search id this server did not make (forged, altered, from another bundles folder) or malformed."""


@dataclass(frozen=True)
class ShownAnswer:
    """What one query of a /search answer showed: its collection, version, mode and ids in rank order."""

    collection: str
    version: str
    mode: str
    ids: tuple[str, ...]
    at: float

    def rank_of(self, doc_id: str) -> int | None:
        """1-based rank of `doc_id` in the answer; None when it was not shown."""
        try:
            return self.ids.index(doc_id) + 1
        except ValueError:
            return None


@functools.lru_cache(maxsize=64)
def load_secret(bundles_dir: str | Path) -> bytes:
    """(Read once per folder per process: /search signs every answer.) The folder's signing secret, made on first use (two replicas racing: the last replace wins and the
    loser re-reads it, so both sign with the same bytes from then on)."""
    path = Path(bundles_dir) / SECRET_FILE
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{SECRET_FILE}.{os.getpid()}")
        tmp.write_bytes(secrets.token_bytes(SECRET_BYTES))
        os.chmod(tmp, 0o600)
        try:
            os.link(tmp, path)  # exclusive: an existing secret is never replaced
        except FileExistsError:
            pass
        finally:
            tmp.unlink(missing_ok=True)
    return path.read_bytes()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def sign(secret: bytes, shown: ShownAnswer) -> str:
    payload = json.dumps(
        {"c": shown.collection, "v": shown.version, "m": shown.mode, "ids": list(shown.ids), "t": shown.at},
        separators=(",", ":"),
        ensure_ascii=False,
    ).encode("utf-8")
    mac = hmac.new(secret, payload, hashlib.sha256).digest()
    return f"{_b64(payload)}.{_b64(mac)}"


def make(secret: bytes, collection: str, version: str, mode: str, ids: list[str]) -> str:
    return sign(secret, ShownAnswer(collection, version, mode, tuple(ids), round(time.time(), 3)))


def verify(secret: bytes, search_id: str) -> ShownAnswer:
    """The answer a search id describes; SearchIdError unless this folder's secret signed it."""
    body, sep, tag = search_id.partition(".")
    try:
        payload, mac = _unb64(body), _unb64(tag)
    except (ValueError, TypeError):
        raise SearchIdError("is not a search id this server made (not base64url)") from None
    expected = hmac.new(secret, payload, hashlib.sha256).digest()
    if not sep or not hmac.compare_digest(mac, expected):
        raise SearchIdError("is not a search id this server made (its signature does not verify)")
    data = json.loads(payload)
    return ShownAnswer(data["c"], data["v"], data["m"], tuple(data["ids"]), float(data["t"]))
