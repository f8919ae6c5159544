"""Where jobs live and when a silent worker counts as dead, when nothing says otherwise: the one place
the API's Settings (SEARCH_QUEUE_URL, SEARCH_JOB_HEARTBEAT_TIMEOUT_S) and the worker / jobs CLI (the
same variables as their --queue, --heartbeat-timeout) take their defaults from. Standard library only,
so the settings module imports it without the queue's libraries."""

from __future__ import annotations

from pathlib import Path

DEFAULT_HEARTBEAT_TIMEOUT_S = 30.0  # a running job whose heartbeat is older reads as failed


def default_queue_url(bundles_dir: str | Path) -> str:
    """A SQLite file `jobs.db` beside the bundles folder (in its parent folder)."""
    return f"sqlite:///{(Path(bundles_dir).parent / 'jobs.db').as_posix()}"
