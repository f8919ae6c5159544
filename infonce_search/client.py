"""`Client` (sync) and `AsyncClient` for the infonce-search API, on httpx.

One source: AsyncClient is written in infonce_search/_async/client.py and the blocking Client is generated
from it by unasync (infonce_search/_sync/client.py, `python scripts/unasync_client.py`), so the two offer
the same methods with the same signatures and docs. This module is where both are imported from.
"""

from __future__ import annotations

from infonce_search._async.client import AsyncClient, TokenInput, Vector
from infonce_search._sync.client import Client

__all__ = ["AsyncClient", "Client", "TokenInput", "Vector"]
