"""The page in a real browser: headless Chromium (Debian's `chromium` package) driven by playwright, against
the real app served by uvicorn on a loopback port, on a real bundle with a real gap report.

Every page a test opens collects console errors and uncaught exceptions (any fails the test) and every
request it makes (each must go to the app's own origin). A screenshot of each state is saved under
var/screenshots (the pytest summary prints the folder).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.app.conftest import publish
from tests.app.ui.conftest import SAVED, SCREENSHOTS
from tests.servers import free_port

pytestmark = pytest.mark.browser
KEY = "ui-test-key"
PAGE_BUDGET_BYTES = 100_000
REPO = Path(__file__).resolve().parents[3]


def _chromium() -> str:
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


@pytest.fixture(scope="module")
def versions(ui_staged, tmp_path_factory) -> tuple[Path, str, str]:
    """A bundles folder of this module's own (its tests activate versions): A live, B kept as candidate."""
    bundles = tmp_path_factory.mktemp("ui-browser-bundles")
    return bundles, publish(ui_staged["A"], bundles), publish(ui_staged["B"], bundles, force=False)


@pytest.fixture(scope="module")
def server(versions, tmp_path_factory) -> Iterator[str]:
    """uvicorn serving the real app on a free loopback port; a SQLite job queue and a data root, no worker."""
    bundles, _, _ = versions
    root = tmp_path_factory.mktemp("ui-server")
    dataset = root / "data" / "mini"
    (dataset / "qrels").mkdir(parents=True)
    (dataset / "corpus.jsonl").write_text('{"_id": "d1", "title": "t", "text": "x"}\n')
    port = free_port()
    env = os.environ | {
        "PYTHONPATH": str(REPO),
        "SEARCH_BUNDLES_DIR": str(bundles),
        "SEARCH_API_KEY": KEY,
        "SEARCH_ENCODER_BACKEND": "torch",
        "SEARCH_QUEUE_URL": f"sqlite:///{root / 'jobs.db'}",
        "SEARCH_DATA_ROOT": str(root / "data"),
        "SEARCH_RELOAD_POLL_SECONDS": "0.2",
    }
    log = (root / "uvicorn.log").open("w")
    cmd = [sys.executable, "-m", "uvicorn", "--factory", "app.main:create_app", "--host", "127.0.0.1"]
    proc = subprocess.Popen(
        [*cmd, "--port", str(port)], cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            assert proc.poll() is None, f"uvicorn exited: {(root / 'uvicorn.log').read_text()[-3000:]}"
            try:
                if httpx.get(f"{base}/readyz", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "the API did not become ready within 180 s"
            time.sleep(0.3)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    executable = _chromium()
    from playwright.sync_api import sync_playwright

    if SCREENSHOTS.is_dir():
        for old in [*SCREENSHOTS.glob("*.png"), *SCREENSHOTS.glob("*.txt")]:
            old.unlink()
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        # --no-sandbox: CI runs as root, where Chromium's sandbox refuses to start
        b = p.chromium.launch(executable_path=executable, args=["--no-sandbox", "--disable-dev-shm-usage"])
        yield b
        b.close()


@dataclass
class Watched:
    """A page with what it logged and fetched."""

    page: Any
    base: str
    errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)
    sizes: dict[str, int] = field(default_factory=dict)
    expected_errors: list[str] = field(default_factory=list)

    def shot(self, name: str) -> Path:
        """Screenshot of the whole page, and a line with the bytes it has loaded so far beside it."""
        path = SCREENSHOTS / f"{name}.png"
        self.page.screenshot(path=str(path), full_page=True)
        SAVED.append(path)
        with (SCREENSHOTS / "page-weight.txt").open("a") as f:
            f.write(f"{name}: {self.weight()} bytes without the plots, {self.weight(plots=True)} with them\n")
        return path

    def weight(self, *, plots: bool = False) -> int:
        return sum(n for url, n in self.sizes.items() if plots or "/plots/" not in url)


@pytest.fixture()
def watched(browser, server) -> Iterator[Watched]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(30_000)  # the shared 2-core machine can be slow; a pass never waits this long
    w = Watched(page, server)

    def on_console(msg: Any) -> None:
        if msg.type == "error":
            w.errors.append(f"console: {msg.text} ({msg.location.get('url', '')})")

    def on_response(response: Any) -> None:
        try:
            w.sizes[response.url] = len(response.body())
        except Exception:  # a redirect or an aborted request has no body
            w.sizes.setdefault(response.url, 0)

    page.on("console", on_console)
    page.on("pageerror", lambda exc: w.errors.append(f"uncaught: {exc}"))
    page.on("request", lambda request: w.requests.append(request.url))
    page.on("response", on_response)
    yield w
    context.close()
    # the browser's own line for a response the test provoked on purpose (e.g. a 403) is expected
    unexpected = [e for e in w.errors if not any(x in e for x in w.expected_errors)]
    assert not unexpected, "errors in the browser:\n" + "\n".join(unexpected)
    foreign = [u for u in w.requests if not u.startswith(server + "/") and not u.startswith("data:")]
    assert not foreign, f"requests outside the app's origin: {foreign}"


def _wait_js(page: Any, expression: str, timeout_s: float = 30.0) -> None:
    """Poll a JavaScript expression from here until it is true. Not page.wait_for_function: its polling
    evaluates strings inside the page, which the page's CSP (no 'unsafe-eval') rightly refuses."""
    deadline = time.monotonic() + timeout_s
    while not page.evaluate(expression):
        assert time.monotonic() < deadline, f"timed out after {timeout_s} s waiting for {expression}"
        time.sleep(0.1)


def _search_api(base: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    r = httpx.post(f"{base}/search", json=body, timeout=60)
    r.raise_for_status()
    return r.json()["results"][0]["hits"]


def test_search_shows_ranked_results_from_the_app(watched, slice_data, versions):
    page, base = watched.page, watched.base
    _, live, _ = versions
    page.goto(base + "/")
    page.wait_for_selector(f"#live-badge:has-text('{live}')")
    assert page.locator("#mode-wrap").is_hidden() == (
        not httpx.get(f"{base}/ui/overview").json()["search_modes"]
    )
    query = next(iter(slice_data.queries.values()))
    page.fill("#q", query)
    page.fill("#top-k", "5")
    page.click("#search-form button[type=submit]")
    page.wait_for_selector("#results[data-answered='1']")
    expected = _search_api(base, {"query": query, "top_k": 5, "include": ["title"]})
    assert page.locator("#results .doc-id").all_inner_texts() == [h["id"] for h in expected]
    assert page.locator("#results .title").all_inner_texts() == [h["title"] or "(untitled)" for h in expected]
    scores = [float(s) for s in page.locator("#results .score").all_inner_texts()]
    assert scores == sorted(scores, reverse=True) and scores[0] == pytest.approx(
        expected[0]["score"], abs=1e-4
    )
    assert all(len(s) > 20 for s in page.locator("#results .snippet").all_inner_texts())
    status = page.inner_text("#search-status")
    assert f"5 results from bundle {live}" in status and "encode" in status and "round trip" in status
    watched.shot("1-search")

    # a filter typed as key=value reaches the server as a metadata filter
    page.fill("#filters", "group=a, year>=2010")
    page.click("#search-form button[type=submit]")
    page.wait_for_selector("#results[data-answered='2']")
    metas = page.locator("#results .meta").all_inner_texts()
    filtered = _search_api(
        base, {"query": query, "top_k": 5, "filter": {"group": "a", "year": {"gte": 2010}}}
    )
    assert len(metas) == len(filtered) and all('group="a"' in m for m in metas)
    assert all(int(m.split("year=")[1].split()[0]) >= 2010 for m in metas)
    watched.shot("2-search-filtered")
    assert watched.weight() < PAGE_BUDGET_BYTES, f"page weight {watched.weight()} bytes: {watched.sizes}"


def test_the_report_renders_with_its_plots(watched, versions):
    page, base = watched.page, watched.base
    _, live, _ = versions
    page.goto(base + "/")
    page.click("nav a[data-tab=report]")
    page.wait_for_selector("#report img[data-plot] >> nth=1")
    _wait_js(
        page,
        "[...document.querySelectorAll('#report img[data-plot]')].every(i => i.complete && i.naturalWidth > 0)",
    )
    sizes = page.eval_on_selector_all(
        "#report img[data-plot]", "imgs => imgs.map(i => [i.dataset.plot, i.naturalWidth, i.naturalHeight])"
    )
    assert sorted(s[0] for s in sizes) == ["risk_vs_k.png", "train_vs_test.png"]
    assert all(w > 300 and h > 300 for _, w, h in sizes), sizes
    report = httpx.get(f"{base}/generalization-gap").json()["report"]
    text = page.inner_text("#report")
    assert f"Generalization gap of bundle {live}" in text
    assert f"{report['gap']['value']:.3f}" in text  # the gap, with its CI
    assert f"[{report['gap']['ci_low']:.3f}, {report['gap']['ci_high']:.3f}]" in text
    assert f"a = {report['fit']['a']:.3f}" in text and "CE∞" in text
    assert "k_sufficient" in text and (
        "Training used k = 15" in text or "not reached within the grid" in text
    )
    vacuous = [b for b in ("finite_k_log", "prop1_upper") if report["theory_terms"][b]["vacuous"]]
    assert page.locator("#report .badge:has-text('vacuous')").count() >= len(vacuous)
    assert "not computable" in text and "complexity_penalty" in text  # a term that cannot be evaluated
    assert "nDCG@10" in text and f"{report['retrieval']['test']['ndcg_at_10']:.4f}" in text
    assert text.count("what it means") >= 5  # one explanation column per table
    watched.shot("3-report")
    assert watched.weight() < PAGE_BUDGET_BYTES, f"page weight without the plots {watched.weight()} bytes"
    assert watched.weight(plots=True) > watched.weight() + 20_000  # the plots did load


def test_a_reindex_job_is_listed_and_can_be_cancelled(watched):
    page, base = watched.page, watched.base
    page.goto(base + "/#jobs")
    page.fill("#api-key", KEY)
    page.select_option("#job-type", "reindex")
    page.fill("#job-dataset", "mini")
    page.click("#job-form button[type=submit]")
    page.wait_for_selector("#job-status.ok")
    job_id = page.inner_text("#job-status").split("job ")[1].split(";")[0]
    row = page.locator(f"#jobs tr[data-job='{job_id}']")
    row.wait_for()
    assert row.locator("td").nth(1).inner_text() == "reindex"
    assert row.locator(".state").inner_text() == "queued"  # no worker in this test
    assert "dataset mini" in row.inner_text()  # the key unlocks the detail
    watched.shot("4-jobs-queued")
    row.locator("button:has-text('Cancel')").click()
    page.wait_for_selector(f"#jobs tr[data-job='{job_id}'] .state.cancelled")
    assert httpx.get(f"{base}/jobs/{job_id}").json()["state"] == "cancelled"
    watched.shot("5-jobs-cancelled")


def test_activate_with_a_wrong_key_shows_the_error_then_roll_forward_and_back(watched, versions):
    page, base = watched.page, watched.base
    _, live, candidate = versions
    page.goto(base + "/#bundle")
    page.wait_for_selector(f"#versions tr.live:has-text('{live}')")
    facts = page.inner_text("#live")
    assert live in facts and "Flat" in facts and "exact search" in facts and "cosine" in facts
    assert "all-MiniLM-L6-v2" in facts and "τ = 0.05" in facts
    row = page.locator(f"#versions tr:has-text('{candidate}')")
    assert row.inner_text().count("kept as candidate") == 1  # the gate's decision on B, said once
    assert page.locator("#gate-log tbody tr").count() == 2
    watched.shot("6-bundle")

    watched.expected_errors.append("status of 403")  # Chromium logs the refused request itself
    page.fill("#api-key", "not-the-key")
    row.locator("button:has-text('Activate')").click()
    page.wait_for_selector("#bundle-status.error")
    assert "403 forbidden: wrong API key" in page.inner_text("#bundle-status")
    watched.shot("7-bundle-wrong-key")
    assert httpx.get(f"{base}/bundles").json()["live"] == live

    page.fill("#api-key", KEY)
    row.locator("button:has-text('Activate')").click()
    page.wait_for_selector(f"#versions tr.live:has-text('{candidate}')")
    assert f"{candidate} is live (was {live}" in page.inner_text("#bundle-status")
    page.locator(f"#versions tr:has-text('{live}') button:has-text('Roll back')").click()
    page.wait_for_selector(f"#versions tr.live:has-text('{live}')")
    assert httpx.get(f"{base}/bundles").json()["live"] == live
    watched.shot("8-bundle-rolled-back")


@pytest.mark.parametrize("path", ["/docs", "/redoc"])
def test_the_api_docs_render_offline_under_the_page_csp(watched, path):
    """Issue 27, item 9: /docs loads every file from this origin (no CDN: `watched` fails on any request
    elsewhere) and runs under the page's CSP (a refused inline script or style is a console error, which
    fails the test too); /redoc leads to it."""
    page, base = watched.page, watched.base
    response = page.goto(base + path)
    assert response is not None and response.headers["content-security-policy"].startswith(
        "default-src 'none'"
    )
    assert page.url == base + "/docs"
    page.wait_for_selector(".opblock")
    assert page.locator(".opblock").count() > 5  # every operation rendered
    watched.shot(f"api-docs{path.replace('/', '-')}")


def test_the_collection_selector_switches_the_page_and_the_form_creates_one(watched, versions, ui_staged):
    page, base = watched.page, watched.base
    bundles, live, _ = versions
    other = publish(ui_staged["B"], bundles / "collections" / "other")  # a second collection, B live there
    page.goto(base + "/")
    page.wait_for_selector(f"#live-badge:has-text('{live}')")
    page.wait_for_selector("#collection option[value=other]", state="attached")
    page.select_option("#collection", "other")
    page.wait_for_selector(f"#live-badge:has-text('{other}')")
    page.fill("#q", "vitamin d and bone density")
    page.click("#search-form button[type=submit]")
    page.wait_for_selector("#results[data-answered='1']")
    assert f"from bundle {other}" in page.inner_text("#search-status")
    watched.shot("9-collection-other")

    page.click("nav a[data-tab=collections]")
    page.wait_for_selector("#collections-table tr[data-collection=other]")
    assert "loaded" in page.inner_text("#collections-table tr[data-collection=other]")
    page.fill("#api-key", KEY)
    page.fill("#collection-name", "made-here")
    page.click("#collection-form button[type=submit]")
    page.wait_for_selector("#collections-status.ok")
    assert "Created collection made-here" in page.inner_text("#collections-status")
    page.wait_for_selector("#collections-table tr[data-collection=made-here]")
    assert httpx.get(f"{base}/collections/made-here").json()["current"] is None
    watched.shot("10-collections")
    page.select_option("#collection", "default")
    page.wait_for_selector(f"#live-badge:has-text('{live}')")
    page.click("nav a[data-tab=search]")
    page.fill("#q", "vitamin d and bone density")
    page.click("#search-form button[type=submit]")
    page.wait_for_selector("#results[data-answered='2']")
    assert f"from bundle {live}" in page.inner_text("#search-status")
