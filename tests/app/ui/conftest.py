"""Bundles for the page's tests: the API tests' demo-dataset slice with a real generalization-gap report.

The report is computed by training.gap.report on that slice (the real encoder; its 30 queries split into
15 "training" and 15 held-out ones, the document embeddings reused) and written with its real PNG plots,
so the page renders what a pipeline would write. Bundle A carries it and a BM25 index with its fusion
tuned on half the queries (training.hybrid.lexical_step, as `index` does), so every search mode is there
to show, and is live; bundle B (dense only, a worse recorded metric) is published through the gate and
kept as a candidate.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.app.conftest import publish
from tests.browser import LAUNCH_ARGS, chromium_executable
from tests.servers import free_port

REPO = Path(__file__).resolve().parents[3]
SCREENSHOTS = REPO / "var" / "screenshots"  # /var/ is ignored by git
SAVED: list[Path] = []  # screenshots written in this session (the summary names their folder)


@pytest.fixture(scope="session")
def ui_staged(tmp_path_factory, shared_encoder, slice_data, doc_embeddings) -> dict[str, Path]:
    from contract.jobs.plan import IndexPlan
    from training.bundle.build import BuildOptions, BundleRecord, build_bundle
    from training.data.validation_carve import carve_validation
    from training.gap.report import CorpusVectors, ReportOptions, compute_report, write_report
    from training.hybrid.lexical_step import attach_lexical

    ids = sorted(slice_data.queries)
    half = len(ids) // 2

    def split(keep: list[str]):
        return replace(
            slice_data,
            queries={q: slice_data.queries[q] for q in keep},
            qrels={q: slice_data.qrels[q] for q in keep},
        )

    report = compute_report(
        shared_encoder,
        split(ids[:half]),
        split(ids[half:]),
        ReportOptions(k=15, n_boot=200, k_max=64, k_rule="batch size 16 − 1 (test slice)"),
        corpus=CorpusVectors(list(slice_data.corpus), doc_embeddings),
    )
    root = tmp_path_factory.mktemp("ui-staged")
    write_report(report, root / "report")
    build = BuildOptions(index=IndexPlan(kind="flat"), show_progress=False)
    a = build_bundle(
        shared_encoder,
        slice_data.corpus,
        staging_dir=root / "A",
        doc_embeddings=doc_embeddings,
        record=BundleRecord(report_dir=root / "report", metrics={"test": {"ndcg@10": 0.6}}),
        build=build,
    )
    query_emb = shared_encoder.encode(list(slice_data.queries.values()), kind="query")
    validation = carve_validation(slice_data, 0.5, seed=0)[1]
    attach_lexical(a, shared_encoder, slice_data, doc_embeddings, query_emb, validation)
    b = build_bundle(
        shared_encoder,
        slice_data.corpus,
        staging_dir=root / "B",
        doc_embeddings=doc_embeddings,
        record=BundleRecord(metrics={"test": {"ndcg@10": 0.1}}),
        build=build,
    )
    return {"A": a, "B": b}


@pytest.fixture(scope="session")
def ui_bundles(tmp_path_factory, ui_staged) -> tuple[Path, str, str]:
    """(bundles folder, live version A, candidate version B that the gate kept out)."""
    bundles = tmp_path_factory.mktemp("ui-bundles")
    live = publish(ui_staged["A"], bundles)
    candidate = publish(ui_staged["B"], bundles, force=False)
    return bundles, live, candidate


# -- the page in a real browser (test_ui_browser.py, test_ui_feedback.py): a uvicorn server per module --------
KEY = "ui-test-key"
PAGE_BUDGET_BYTES = 150_000  # the page's files (test_ui_routes.py bounds them to 110 kB) and its API answers
# the two sizes every new page test runs at: a laptop, and a phone (iPhone 12-15's CSS pixels)
VIEWPORTS = {"desktop": {"width": 1280, "height": 900}, "phone": {"width": 390, "height": 844}}
both_sizes = pytest.mark.parametrize("watched", list(VIEWPORTS), indirect=True)


@pytest.fixture(scope="module")
def versions(ui_staged, tmp_path_factory) -> tuple[Path, str, str]:
    """A bundles folder of this module's own (its tests activate versions): A live, B kept as candidate."""
    bundles = tmp_path_factory.mktemp("ui-browser-bundles")
    return bundles, publish(ui_staged["A"], bundles), publish(ui_staged["B"], bundles, force=False)


@pytest.fixture(scope="module")
def server_root(tmp_path_factory) -> Path:
    """The server's own folder: its job queue (jobs.db, jobs.records.db), data root and log."""
    return tmp_path_factory.mktemp("ui-server")


@pytest.fixture(scope="module")
def server(versions, server_root) -> Iterator[str]:
    """uvicorn serving the real app on a free loopback port; a SQLite job queue and a data root, no worker."""
    bundles, _, _ = versions
    root = server_root
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
    executable = chromium_executable()
    from playwright.sync_api import sync_playwright

    if SCREENSHOTS.is_dir():
        for old in [*SCREENSHOTS.glob("*.png"), *SCREENSHOTS.glob("views/*.png"), *SCREENSHOTS.glob("*.txt")]:
            old.unlink()
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=executable, args=LAUNCH_ARGS)
        yield b
        b.close()


@dataclass
class Watched:
    """A page with what it logged and fetched."""

    page: Any
    base: str
    size: str = "desktop"
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

    def view_shot(self, name: str) -> Path:
        """What the screen shows (not the whole page): the pictures docs/screenshots/ keeps, by size."""
        path = SCREENSHOTS / "views" / f"{name}-{self.size}.png"
        path.parent.mkdir(exist_ok=True)
        self.page.screenshot(path=str(path))
        SAVED.append(path)
        return path

    def no_horizontal_scroll(self) -> None:
        """Nothing wider than the viewport: the page never scrolls sideways (tables scroll in their box)."""
        width = VIEWPORTS[self.size]["width"]
        scroll = self.page.evaluate("document.documentElement.scrollWidth")
        assert scroll <= width, f"the page is {scroll} px wide at a {width} px viewport"

    def weight(self, *, plots: bool = False) -> int:
        return sum(n for url, n in self.sizes.items() if plots or "/plots/" not in url)


@pytest.fixture()
def watched(browser, server, request) -> Iterator[Watched]:
    size = getattr(request, "param", "desktop")
    context = browser.new_context(viewport=VIEWPORTS[size])
    page = context.new_page()
    page.set_default_timeout(30_000)  # the shared 2-core machine can be slow; a pass never waits this long
    w = Watched(page, server, size)

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


def search_api(base: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    r = httpx.post(f"{base}/search", json=body, timeout=60)
    r.raise_for_status()
    return r.json()["results"][0]["hits"]


def pytest_terminal_summary(terminalreporter) -> None:
    if SAVED:
        terminalreporter.write_line(f"page screenshots ({len(SAVED)}): {SCREENSHOTS}")
