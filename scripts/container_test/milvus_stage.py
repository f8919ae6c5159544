"""The milvus profile, run for real: Milvus standalone built from PyPI's `milvus` package
(docker/milvus.Dockerfile), the stack publishing into it and searching it, and its data surviving restarts.

On the stack's volumes but a fresh `bundles` volume, so bootstrap trains and publishes its first bundle
into Milvus (a FAISS bundle would be served from its file and prove nothing about Milvus). Milvus comes
up healthy first: podman-compose 1.6.0 `run` refuses a dependency on a service it knows nothing of
("missing services [milvus]") and does not wait for a dependency's health, so bootstrap runs with
--no-deps after Milvus is healthy (stack.up); docker compose waits by itself (depends_on, required: false).
"""

from __future__ import annotations

import json
from pathlib import Path

import http_checks as http
from proc import Clock, Failure, say
from stack import Stack

URI = "http://milvus:19530"  # the compose service, as the API and the worker reach it
NAME = "infonce"  # SEARCH_MILVUS_NAME's default (app/settings.py)
# run inside the api container (its image has pymilvus): the version's collection, its rows, the alias
PROBE = (
    "import json, re, sys; from pymilvus import MilvusClient; c = MilvusClient(uri=sys.argv[1], timeout=30); "
    "name = sys.argv[2] + '_v' + re.sub(r'[^A-Za-z0-9_]', '_', sys.argv[3]); "
    "print(json.dumps({'collections': c.list_collections(), 'name': name, "
    "'rows': int(c.get_collection_stats(name)['row_count']) if c.has_collection(name) else -1, "
    "'alias': c.describe_alias(sys.argv[2] + '_live').get('collection_name')}))"
)

# run inside the milvus container: SIGKILL to the `milvus` binary (not to the entrypoint that started it)
KILL_SERVER = (
    "import os, pathlib; pids = [int(p.name) for p in pathlib.Path('/proc').iterdir() if p.name.isdigit() "
    "and (p / 'comm').read_text().strip() == 'milvus']; assert pids, 'no milvus process'; "
    "[os.kill(pid, 9) for pid in pids]"
)


class MilvusStage:
    def __init__(self, stack: Stack, clock: Clock, env: Path, base: str, api_key: str, dataset: str,
                 job_timeout: float):  # fmt: skip
        self.stack, self.clock, self.env, self.base = stack, clock, env, base
        self.api_key, self.dataset, self.job_timeout = api_key, dataset, job_timeout
        self.profiles = ["milvus"]

    def compose(self, *args: str) -> str:
        return self.stack.compose(self.env, *args, profiles=self.profiles)

    def in_milvus(self, version: str) -> int:
        """The version's collection exists in Milvus, the live alias names it; returns its row count."""
        api = self.stack.e.container(self.stack.project, "api")
        out = self.stack.e("exec", api, "python", "-c", PROBE, URI, NAME, version, what="Milvus probe")
        seen = json.loads(out.stdout.strip().splitlines()[-1])
        if seen["rows"] <= 0:
            raise Failure(f"Milvus has no rows for version {version} ({seen['name']}): {seen['collections']}")
        if seen["alias"] != seen["name"]:
            raise Failure(f"alias {NAME}_live names {seen['alias']}, not the live version's {seen['name']}")
        say(f"   Milvus: {seen['name']} holds {seen['rows']} rows, {NAME}_live names it")
        return int(seen["rows"])

    def restart(self, service: str) -> None:
        before = self.stack.started_at(service)
        self.compose("restart", service)
        self.stack.wait_restarted(service, before, f"compose restart {service}")
        self.stack.healthy(service)

    def run(self) -> None:
        step, stack = self.clock.step, self.stack
        with step("compose milvus profile: Milvus healthy, bootstrap publishes into it"):
            stack.unwatch()
            stack.compose(self.env, "down", profiles=["redis", "milvus"])  # keeps data and queue
            stack.e("volume", "rm", f"{stack.project}_bundles", log=stack.log)
            self.compose("up", "-d", "--no-build", "--no-deps", "milvus")
            stack.healthy("milvus")
            stack.up(self.env, ["api", "worker"], profiles=self.profiles)
            stack.healthy("api", "worker")
            version, ids = http.search_ids(self.base)
            self.in_milvus(version)
        with step("compose milvus profile: reindex job publishes into Milvus, /search answers from it"):
            options = {"onnx": False, "index_backend": "milvus"}
            job = http.submit_reindex(self.base, self.api_key, self.dataset, options)
            version = http.wait_job_live(self.base, self.api_key, job, self.job_timeout)
            http.wait_serving(self.base, version)
            rows = self.in_milvus(version)
            served, ids = http.search_ids(self.base)
            if served != version:
                raise Failure(f"/search answered from {served}, not the job's version {version}")
        with step("compose milvus profile: restart milvus and api, same version, rows and ids"):
            self.restart("milvus")
            self.restart("api")
            http.wait_serving(self.base, version, timeout=120)
            if self.in_milvus(version) != rows:
                raise Failure(f"Milvus lost rows of version {version} across the restart")
            after = http.search_ids(self.base)
            if after != (version, ids):
                raise Failure(f"after the restarts /search answered {after}, before {(version, ids)}")
            say(f"   same ids after the restarts: {', '.join(ids)}")
        with step(
            "compose milvus profile: Milvus killed, its container exits and restarts, /search recovers"
        ):
            # kill -9 of the server process only (an OOM kill, or Milvus exiting after its etcd session
            # expired): the entrypoint (docker/milvus_launch.py) exits with it, the engine restarts it
            before = stack.started_at("milvus")
            milvus = stack.e.container(stack.project, "milvus")
            stack.e("exec", milvus, "python3", "-c", KILL_SERVER, what="kill -9 of Milvus", check=False)
            stack.wait_restarted("milvus", before, "restart: unless-stopped after Milvus crashed")
            stack.healthy("milvus")
            http.wait_serving(self.base, version, timeout=180)
            after = http.search_ids(self.base)
            if after != (version, ids):
                raise Failure(f"after Milvus crashed /search answered {after}, before {(version, ids)}")
            say("   the API recovered by itself, same version and ids")
