"""What a user checks over HTTP: search answers, a job submitted with the API key goes live and is served."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from typing import Any

from proc import Failure, say

QUERY = "Return the number of items in the queue."  # a demo-dataset query (README's example)
FINISHED = ("succeeded", "failed", "cancelled")


def request(
    method: str, url: str, body: dict[str, Any] | None = None, key: str | None = None, timeout: float = 60
) -> tuple[int, Any]:
    """(status, parsed JSON body or text); connection errors are status 0 with the reason."""
    headers = {"content-type": "application/json"}
    if key:
        headers["X-API-Key"] = key
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers=headers, method=method)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as response:
            status, raw = response.status, response.read()
    except urllib.error.HTTPError as e:
        status, raw = e.code, e.read()
    except (urllib.error.URLError, OSError) as e:
        return 0, str(getattr(e, "reason", e))
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw.decode(errors="replace")


def search(base: str) -> str:
    """POST /search answers 200 with hits; returns the bundle version that answered."""
    return search_ids(base)[0]


def search_ids(base: str) -> tuple[str, list[str]]:
    """POST /search answers 200 with hits; the bundle version that answered and the hits' ids."""
    status, body = request("POST", f"{base}/search", {"query": QUERY, "top_k": 3})
    if status != 200:
        raise Failure(f"POST /search answered {status}: {str(body)[:300]}")
    hits = body["results"][0]["hits"]
    if not hits:
        raise Failure(f"POST /search answered 200 with no hits (version {body['version']})")
    say(f"   POST /search: 200, {len(hits)} hits from version {body['version']}")
    return str(body["version"]), [str(hit["id"]) for hit in hits]


def ready_version(base: str) -> str | None:
    status, body = request("GET", f"{base}/readyz", timeout=10)
    return str(body["version"]) if status == 200 and isinstance(body, dict) else None


def wait_serving(base: str, version: str, timeout: float = 120) -> None:
    """The API's /readyz names `version` (it polls CURRENT and swaps), then /search answers from it."""
    t0 = time.monotonic()
    while (seen := ready_version(base)) != version:
        if time.monotonic() - t0 > timeout:
            raise Failure(f"the API still serves version {seen} {timeout:.0f} s after {version} went live")
        time.sleep(1)
    served = search(base)
    if served != version:
        raise Failure(f"/readyz names version {version} but POST /search answered from {served}")


def submit_reindex(base: str, key: str, dataset: str, options: dict[str, Any] | None = None) -> str:
    """POST /jobs: refused without the key, accepted with it; returns the job id."""
    job = {"type": "reindex", "dataset": dataset, "options": options or {"onnx": False}}
    status, body = request("POST", f"{base}/jobs", job)
    if status not in (401, 403):
        raise Failure(
            f"POST /jobs without the API key answered {status}, expected 401/403: {str(body)[:200]}"
        )
    status, body = request("POST", f"{base}/jobs", job, key=key)
    if status not in (200, 201, 202):
        raise Failure(f"POST /jobs with the API key answered {status}: {str(body)[:300]}")
    say(f"   POST /jobs: {status} without the key refused first; job {body['id']} queued")
    return str(body["id"])


def wait_job_live(base: str, key: str, job_id: str, timeout: float) -> str:
    """Poll GET /jobs/{id} until it finishes; it must succeed and its bundle go live. Returns its version."""
    t0 = time.monotonic()
    last_state = None
    while True:
        status, job = request("GET", f"{base}/jobs/{job_id}", key=key)
        if status != 200:
            raise Failure(f"GET /jobs/{job_id} answered {status}: {str(job)[:300]}")
        if job["state"] != last_state:
            say(f"   job {job_id}: {job['state']} after {time.monotonic() - t0:.0f} s")
            last_state = job["state"]
        if job["state"] in FINISHED:
            break
        if time.monotonic() - t0 > timeout:
            raise Failure(
                f"job {job_id} still {job['state']} after {timeout:.0f} s: {job.get('log_tail', [''])[-1:]}"
            )
        time.sleep(3)
    if job["state"] != "succeeded":
        tail = (job.get("log_tail") or [""])[-1]
        raise Failure(f"job {job_id} {job['state']}: {job.get('error') or tail}")
    if not job.get("live"):
        raise Failure(
            f"job {job_id} built {job.get('bundle_version')} but it did not go live: {job.get('gate_reason')}"
        )
    return str(job["bundle_version"])
