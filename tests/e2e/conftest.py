"""Keep the fresh-clone demo test out of the default run: it installs a clone and trains two models (about
10-15 min on 2 cores), so `make test` (plain `pytest`) *deselects* it, which is not a skip; `make demo-check`
(`pytest -m fresh_clone`) runs it, and CI runs that after `make test` (.ci/run).

A hook rather than `-m "not fresh_clone"` in addopts: any `-m` given on the command line (`-m "not slow"`)
replaces addopts' one and would let the test in."""

from __future__ import annotations

import pytest

MARKER = "fresh_clone"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # a session-wide hook: it sees every collected item, wherever its conftest is
    if MARKER in (config.option.markexpr or ""):
        return
    keep = [item for item in items if item.get_closest_marker(MARKER) is None]
    left_out = [item for item in items if item.get_closest_marker(MARKER) is not None]
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        items[:] = keep
        config.stash[_LEFT_OUT] = len(left_out)


_LEFT_OUT = pytest.StashKey[int]()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    n = config.stash.get(_LEFT_OUT, 0)
    if n:
        terminalreporter.write_line(f"{n} fresh-clone demo test deselected: `make demo-check` runs it")
