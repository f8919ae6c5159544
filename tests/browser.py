"""Headless Chromium for the page's tests: Debian's `chromium` driven by playwright (never `playwright
install`), shared by tests/app/ui/test_ui_browser.py (a test server) and tests/e2e/ (a fresh clone's demo)."""

from __future__ import annotations

import os
import shutil
import time
from typing import Any

import pytest

# --no-sandbox: CI runs as root, where Chromium's sandbox refuses to start
LAUNCH_ARGS = ["--no-sandbox", "--disable-dev-shm-usage"]


def chromium_executable() -> str:
    """Debian's chromium, or skip with the reason (fail under CI=true: CI must run the page's tests)."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    why = None
    if found is None:
        why = "chromium is not installed (apt-get install chromium; `make install` does it as root)"
    else:
        try:
            import playwright.sync_api  # noqa: F401
        except ImportError:
            why = "playwright is not installed (pip install -e '.[dev]')"
    if why is not None:
        # the CI runner's own variable (.ci/run runs with CI=true), not a setting of this service
        if os.environ.get("CI") == "true":  # noqa: TID251
            pytest.fail(f"browser tests must run in CI: {why}")
        pytest.skip(f"browser tests not run: {why}")
    assert found is not None
    return found


def wait_js(page: Any, expression: str, timeout_s: float = 30.0) -> None:
    """Poll a JavaScript expression from here until it is true. Not page.wait_for_function: its polling
    evaluates strings inside the page, which the page's CSP (no 'unsafe-eval') rightly refuses."""
    deadline = time.monotonic() + timeout_s
    while not page.evaluate(expression):
        assert time.monotonic() < deadline, f"timed out after {timeout_s} s waiting for {expression}"
        time.sleep(0.1)


def search_on_page(page: Any, query: str, *, mode: str = "", top_k: int = 5) -> None:
    """Type a query, pick a mode ("" = default; no selector when the page shows none), search, and wait
    for this answer to be drawn."""
    answered = int(page.get_attribute("#results", "data-answered") or 0)
    page.fill("#q", query)
    page.fill("#top-k", str(top_k))
    if mode or page.locator("#mode-wrap").is_visible():
        page.select_option("#mode", mode)
    page.click("#search-form button[type=submit]")
    page.wait_for_selector(f"#results[data-answered='{answered + 1}']")


def result_ids(page: Any) -> list[str]:
    """The ids of the hits the page shows, in rank order."""
    return list(page.locator("#results .doc-id").all_inner_texts())


def fill_document_form(page: Any, doc_id: str, text: str) -> None:
    """Open the Search tab's "Write a document" form and fill it (title "Zebra marmalade", metadata
    {"source": "page"}); the caller submits."""
    page.click("#doc-write summary")
    page.fill("#doc-id", doc_id)
    page.fill("#doc-title", "Zebra marmalade")
    page.fill("#doc-text", text)
    page.fill("#doc-metadata", '{"source": "page"}')
