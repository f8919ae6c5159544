"""`python -m app.healthcheck`, run exactly as Docker runs it, against live HTTP servers.

A stdlib server covers the answers a probe can meet (200, 503, a hang, nothing listening); the last test
starts the real API with the image's own CMD and probes it with the image's own HEALTHCHECK command.
"""

from __future__ import annotations

import http.server
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.deploy_files import REPO, dockerfile_cmd, dockerfile_env, dockerfile_healthcheck
from tests.servers import free_port, redis_server

HEALTHCHECK = [sys.executable, "-m", "app.healthcheck"]


def run_probe(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*HEALTHCHECK, *args], cwd=REPO, capture_output=True, text=True, timeout=60, check=False
    )


class _Handler(http.server.BaseHTTPRequestHandler):
    """/ok → 200, /not-ready → 503 with a JSON reason, /hang → answers after 5 s."""

    def do_GET(self) -> None:
        if self.path == "/hang":
            time.sleep(5)
        status, body = {
            "/ok": (200, {"status": "ready", "version": "v1"}),
            "/not-ready": (503, {"error": {"code": "not_ready", "message": "no bundle loaded"}}),
        }.get(self.path, (404, {"error": "not found"}))
        data = json.dumps(body).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except BrokenPipeError:  # the probe gave up on /hang first, as intended
            pass

    def log_message(self, *args: object) -> None:  # keep pytest output clean
        pass


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def test_200_is_healthy(server: str) -> None:
    result = run_probe(f"{server}/ok")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("healthy:")
    assert '"version": "v1"' in result.stdout
    assert len(result.stdout.strip().splitlines()) == 1


def test_503_is_unhealthy_and_shows_the_reason(server: str) -> None:
    result = run_probe(f"{server}/not-ready")
    assert result.returncode == 1
    assert "HTTP 503" in result.stdout
    assert "no bundle loaded" in result.stdout
    assert len(result.stdout.strip().splitlines()) == 1
    assert result.stderr == ""  # a reason, never a traceback


def test_other_status_is_unhealthy(server: str) -> None:
    result = run_probe(f"{server}/missing")
    assert result.returncode == 1
    assert "HTTP 404" in result.stdout


def test_hang_is_unhealthy_after_the_timeout(server: str) -> None:
    result = run_probe(f"{server}/hang", "--timeout", "0.5")
    assert result.returncode == 1
    assert "did not answer within 0.5 s" in result.stdout
    assert result.stderr == ""


def test_connection_refused_is_unhealthy() -> None:
    port = free_port()  # nothing listens there once the probe socket is closed
    result = run_probe(f"http://127.0.0.1:{port}/readyz")
    assert result.returncode == 1
    assert "cannot reach" in result.stdout
    assert "refused" in result.stdout.lower()
    assert result.stderr == ""


def test_bad_arguments_exit_nonzero_with_usage() -> None:
    result = run_probe("http://127.0.0.1:1/readyz", "--timeout", "0")
    assert result.returncode == 2
    assert "--timeout must be positive" in result.stderr


def test_probe_imports_neither_fastapi_nor_torch() -> None:
    """Docker runs it every few seconds: it must stay a cheap stdlib program."""
    code = (
        "import sys, app.healthcheck; "
        "heavy = sorted(m for m in ('fastapi', 'starlette', 'pydantic', 'torch', 'numpy', 'faiss') "
        "if m in sys.modules); print(','.join(heavy))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == ""


def _wait_for_port(port: int, proc: subprocess.Popen[str], deadline_s: float = 120.0) -> None:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise AssertionError(f"uvicorn exited with {proc.returncode}:\n{proc.communicate()[0][-3000:]}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise AssertionError("uvicorn did not open its port in time")


def _publish_tiny_bundle(encoder: object, bundles: Path, staging: Path) -> str:
    """Five documents, the real encoder, a flat index: enough for /readyz's canary query."""
    from contract.jobs.plan import IndexPlan
    from training.bundle.build import BuildOptions, build_bundle
    from training.bundle.store import BundleStore
    from training.data.retrieval_data import Document

    texts = [
        "Vitamin D supplementation and bone mineral density in older adults.",
        "Statins lower LDL cholesterol and cardiovascular risk.",
        "Sleep deprivation impairs working memory.",
        "Aspirin reduces the risk of colorectal cancer.",
        "Exercise improves insulin sensitivity in type 2 diabetes.",
    ]
    corpus = {f"d{i}": Document(id=f"d{i}", title="", text=t, metadata={}) for i, t in enumerate(texts)}
    staged = build_bundle(
        encoder,
        corpus,
        staging_dir=staging,
        build=BuildOptions(index=IndexPlan(kind="flat"), show_progress=False),
    )  # type: ignore[arg-type]
    return BundleStore(bundles).publish(staged, force=True).version


def _stop(proc: subprocess.Popen[str]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.mark.slow
def test_image_healthcheck_against_the_real_api(tmp_path: Path, shared_encoder: object) -> None:
    """The Dockerfile's CMD serves the real app and its HEALTHCHECK tracks readiness.

    Before any bundle (a fresh container before bootstrap) /healthz is 200 and /readyz is not; once a
    bundle is published into the shared folder the running API picks it up and the same probe passes.
    """
    pytest.importorskip("app.main", reason="app.main not written yet")
    port = free_port()
    bundles = tmp_path / "bundles"
    bundles.mkdir()
    (tmp_path / "data").mkdir()
    env = {
        **dockerfile_env(),
        "UVICORN_HOST": "127.0.0.1",
        "UVICORN_PORT": str(port),
        "SEARCH_BUNDLES_DIR": str(bundles),
        "SEARCH_DATA_ROOT": str(tmp_path / "data"),
        "SEARCH_QUEUE_URL": f"sqlite:///{tmp_path / 'queue' / 'jobs.db'}",
        "SEARCH_RELOAD_POLL_SECONDS": "0.2",
        # The image's PATH starts with its venv; here the test venv plays that part.
        "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
    }
    cmd = dockerfile_cmd()
    assert cmd[0] == "uvicorn"
    proc = subprocess.Popen(
        cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        _wait_for_port(port, proc)
        check = [a.replace("127.0.0.1:8000", f"127.0.0.1:{port}") for a in dockerfile_healthcheck()]
        assert check[:3] == ["python", "-m", "app.healthcheck"]
        before = run_probe(*check[3:])
        assert before.returncode == 1, before.stdout
        assert "HTTP 503" in before.stdout
        healthz = run_probe(f"http://127.0.0.1:{port}/healthz")
        assert healthz.returncode == 0, healthz.stdout

        version = _publish_tiny_bundle(shared_encoder, bundles, tmp_path / "staging")
        end = time.monotonic() + 120  # Docker would keep probing; here, a bounded number of retries
        after = run_probe(*check[3:])
        while after.returncode != 0 and time.monotonic() < end and proc.poll() is None:
            time.sleep(0.5)
            after = run_probe(*check[3:])
        assert after.returncode == 0, after.stdout
        assert version in after.stdout
    finally:
        _stop(proc)


# -- worker: python -m training.jobs.healthcheck ----------------------------------------------------

WORKER_CHECK = [sys.executable, "-m", "training.jobs.healthcheck"]


def run_worker_check(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*WORKER_CHECK, *args], cwd=REPO, capture_output=True, text=True, timeout=60, check=False
    )


def only(tmp_path: Path, *pids: int) -> Path:
    """A /proc view holding just these real processes, so workers of parallel test runs stay out."""
    view = tmp_path / "proc"
    view.mkdir(exist_ok=True)
    for pid in pids:
        (view / str(pid)).symlink_to(f"/proc/{pid}")
    return view


@pytest.fixture()
def worker(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """The real `python -m training worker` on a SQLite queue, as the compose worker runs it."""
    if not (REPO / "training" / "__main__.py").exists():
        pytest.skip("`python -m training` entry point not written yet")
    db = tmp_path / "queue" / "jobs.db"
    url = f"sqlite:///{db}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "training", "worker", "--queue", url],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        end = time.monotonic() + 60
        while not db.exists():
            if proc.poll() is not None or time.monotonic() > end:
                proc.kill()
                raise AssertionError(f"worker did not create its queue:\n{proc.communicate()[0][-3000:]}")
            time.sleep(0.1)
        yield proc, url
    finally:
        _stop(proc)


def test_worker_check_healthy_with_a_real_worker(worker: tuple[subprocess.Popen[str], str]) -> None:
    _, url = worker
    result = run_worker_check("--queue", url)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("healthy:")
    assert "alive" in result.stdout and "readable" in result.stdout


def test_worker_check_sees_a_stopped_worker(
    worker: tuple[subprocess.Popen[str], str], tmp_path: Path
) -> None:
    import signal

    from training.jobs.healthcheck import find_worker

    proc, _ = worker
    view = only(tmp_path, proc.pid)
    assert find_worker(view)[0] is True
    proc.send_signal(signal.SIGSTOP)
    try:
        end = time.monotonic() + 10
        while Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in "Tt":
            assert time.monotonic() < end, "SIGSTOP did not stop the worker"
            time.sleep(0.05)
        ok, reason = find_worker(view)
        assert ok is False
        assert f"worker process {proc.pid} is stopped" == reason
    finally:
        proc.send_signal(signal.SIGCONT)


def test_worker_check_without_a_worker(tmp_path: Path) -> None:
    from training.jobs.healthcheck import find_worker

    ok, reason = find_worker(only(tmp_path, os.getpid()))  # pytest itself is no worker
    assert ok is False
    assert "no `python -m training worker` process" in reason


def test_is_worker_matches_the_compose_command() -> None:
    from training.jobs.healthcheck import is_worker

    assert is_worker(["/opt/venv/bin/python", "-m", "training", "worker"])
    assert is_worker(["python3", "-u", "-m", "training", "worker", "--workers", "2"])
    assert not is_worker(["python", "-m", "training", "pipeline", "--data", "worker"])
    assert not is_worker(["python", "-m", "training.jobs.healthcheck", "--queue", "x"])


def test_worker_check_missing_or_corrupt_sqlite_queue(tmp_path: Path) -> None:
    missing = run_worker_check("--no-process-check", "--queue", f"sqlite:///{tmp_path / 'none.db'}")
    assert missing.returncode == 1
    assert "does not exist" in missing.stdout
    corrupt = tmp_path / "corrupt.db"
    corrupt.write_bytes(b"this is not a sqlite database" * 100)
    bad = run_worker_check("--no-process-check", "--queue", f"sqlite:///{corrupt}")
    assert bad.returncode == 1
    assert "cannot be read" in bad.stdout
    assert bad.stderr == ""


def test_worker_check_refuses_an_unknown_queue_scheme() -> None:
    result = run_worker_check("--no-process-check", "--queue", "amqp://localhost/")
    assert result.returncode == 1
    assert "expected sqlite:///path/jobs.db or redis://host:port/db" in result.stdout


@pytest.fixture(scope="module")
def redis_with_password(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    with redis_server(tmp_path_factory.mktemp("redis-hc"), password="s3cret", what="Redis probe") as port:
        yield port


@pytest.mark.redis
def test_worker_check_redis_queue(redis_with_password: int) -> None:
    port = redis_with_password
    good = run_worker_check("--no-process-check", "--queue", f"redis://:s3cret@127.0.0.1:{port}/0")
    assert good.returncode == 0, good.stdout
    assert f"redis 127.0.0.1:{port} answers PING" in good.stdout
    wrong = run_worker_check("--no-process-check", "--queue", f"redis://:nope@127.0.0.1:{port}/0")
    assert wrong.returncode == 1
    assert "refused AUTH" in wrong.stdout
    anonymous = run_worker_check("--no-process-check", "--queue", f"redis://127.0.0.1:{port}/0")
    assert anonymous.returncode == 1
    assert "NOAUTH" in anonymous.stdout
    gone = run_worker_check("--no-process-check", "--queue", f"redis://127.0.0.1:{free_port()}/0")
    assert gone.returncode == 1
    assert "cannot reach redis" in gone.stdout
