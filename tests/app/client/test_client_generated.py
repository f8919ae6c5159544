"""The blocking Client is generated from AsyncClient (scripts/unasync_client.py): the committed file is
exactly what the generator writes, and the two classes offer the same methods with the same signatures."""

from __future__ import annotations

import inspect
import subprocess
import sys
from pathlib import Path

from infonce_search import AsyncClient, Client

REPO = Path(__file__).resolve().parents[3]


def test_the_committed_sync_client_is_what_unasync_writes(tmp_path):
    subprocess.run(
        [sys.executable, "scripts/unasync_client.py", "--out", str(tmp_path)],
        cwd=REPO,
        check=True,
        capture_output=True,
    )
    committed = (REPO / "infonce_search" / "_sync" / "client.py").read_text(encoding="utf-8")
    assert (tmp_path / "client.py").read_text(encoding="utf-8") == committed, "run scripts/unasync_client.py"


def test_both_clients_offer_the_same_methods_with_the_same_signatures():
    def public(cls: type) -> dict[str, str]:
        renamed = {"aclose": "close", "__aenter__": "__enter__", "__aexit__": "__exit__"}
        return {
            renamed.get(name, name): str(inspect.signature(fn)).replace("AsyncClient", "Client")
            for name, fn in vars(cls).items()
            if callable(fn)
            and (not name.startswith("_") or name in ("__init__", *renamed, *renamed.values()))
        }

    sync, aio = public(Client), public(AsyncClient)
    assert len(sync) >= 20 and sync == aio  # every method, the context manager and close included
    assert all(
        inspect.iscoroutinefunction(getattr(AsyncClient, n)) for n in vars(AsyncClient) if n == "search"
    )
    assert not inspect.iscoroutinefunction(Client.search)
