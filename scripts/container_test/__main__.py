"""Container smoke test (`make container-test`): the image and the compose stack, run for real.

From a clean clone, offline but for the package registries: gets an engine (docker when its daemon
answers, else podman, installed from the Debian archive when missing), a base image (pulled, or made
with mmdebstrap when no registry answers), builds the image, then
  1. single container: the bootstrap pipeline on a small demo dataset, then the API from the image's
     default command, healthy through the image's own HEALTHCHECK, answering POST /search;
  2. the compose stack with an env file as a user writes it (API key, demo dataset): bootstrap builds
     the demo dataset and the first bundle, api and worker turn healthy through the engine's health
     checks, POST /search answers, a reindex job submitted over HTTP with the API key goes live and is
     served, and the same version is served after `compose restart api` and after the api's server
     process is killed (the engine restarts it: `restart: unless-stopped`);
  3. the redis profile (Redis built from the Debian archive on the same base): the stack again on the
     same volumes with the Redis queue: bootstrap skips, redis/api/worker healthy, a job through
     Redis goes live;
  4. the milvus profile (Milvus standalone built from PyPI's `milvus` package on the same base, no
     registry): Milvus healthy, bootstrap publishes its bundle into Milvus on a fresh bundles volume, a
     reindex job publishes into Milvus and /search answers from the job's version, and after
     `compose restart milvus` and `restart api` the same version answers with the same ids; after a
     kill -9 of the Milvus process its container exits, the engine restarts it, and /search recovers;
  5. `down -v` removes every container and volume.
Each step prints its wall time; a failure ends the run with one line, `container-test: FAIL: <why>`,
and exit status 1; success with `container-test: N passed, 0 failed` (N steps). Nothing is skipped.

Options: `python3 scripts/container_test --help` (make container-test CONTAINER_TEST_ARGS="...").
"""

from __future__ import annotations

import argparse
import os
import secrets
import socket
import sys
from pathlib import Path

import base_image
import build
import engine as eng
import http_checks as http
from milvus_stage import MilvusStage
from proc import Clock, Failure, say
from stack import Stack

REPO = Path(__file__).resolve().parents[2]
PROJECT = "infonce-smoke"
IMAGE = "localhost/infonce-search:container-test"
REDIS_IMAGE = "localhost/infonce-search-redis:container-test"
MILVUS_IMAGE = "localhost/infonce-search-milvus:container-test"
SOLO = f"{PROJECT}-solo"
DATASET = "pydocs"  # the demo dataset compose's bootstrap builds (docker-compose.yml)
# the demo dataset and recipe, shortened: the smoke test proves the stack, not the model
DEMO_ARGS = "--docs 400 --test-queries 80"
BOOTSTRAP_ARGS = "--max-steps 4 --batch-size 16"
SOLO_BOOTSTRAP = (
    "python -m training demo-data --out /data/pydocs --docs 200 --test-queries 40"
    " && python -m training pipeline --data /data/pydocs --bundles /bundles --quiet"
    " --epochs 1 --max-steps 2 --batch-size 16 --hard-negatives 0 --max-seq-length 64 --no-onnx"
)


def options(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python3 scripts/container_test", description=(__doc__ or "").split("\n")[0]
    )
    add = parser.add_argument
    add("--engine", choices=["auto", "docker", "podman"], default="auto",
        help="auto: docker when its daemon answers (docker info), else podman")  # fmt: skip
    add("--cache", type=Path, default=Path.home() / ".cache" / "infonce-search" / "container-test",
        help="base rootfs, tools, pip config, env files, command log; the engine keeps the image layers "
        "(default: %(default)s)")  # fmt: skip
    add("--profiles", default="redis milvus",
        help="compose profiles to run too, space-separated ('' for none; 'redis' skips milvus)")  # fmt: skip
    add("--base-image", help="BASE_IMAGE for the build (default: the Dockerfile's if the engine has it or "
        "can pull it, else Debian made with mmdebstrap)")  # fmt: skip
    add("--torch-index-url", help="TORCH_INDEX_URL for the build (default: the CPU wheel index when "
        "reachable, else the host's pip index with its find-links)")  # fmt: skip
    add(
        "--job-timeout",
        type=float,
        default=1200,
        help="seconds a reindex job may take (default: %(default)s)",
    )
    add("--keep", action="store_true", help="leave the compose stack up at the end (no down -v)")
    return parser.parse_args(argv)


class Smoke:
    def __init__(self, opts: argparse.Namespace) -> None:
        self.opts = opts
        self.cache = Path(opts.cache)
        self.run_dir = self.cache / "run"
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.log = self.run_dir / "commands.log"
        self.log.write_text("")
        self.clock = Clock()
        self.stack: Stack | None = None
        self.api_key = secrets.token_urlsafe(24)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = int(s.getsockname()[1])
        self.base = f"http://127.0.0.1:{self.port}"
        self.image_size = 0
        self.version = ""  # the bundle version the API must be serving

    @property
    def s(self) -> Stack:
        assert self.stack is not None
        return self.stack

    def env(self, name: str, **extra: str) -> Path:
        """The `.env` a user writes (docs/deploy.md): the API key, the image, where to publish."""
        values = {"SEARCH_API_KEY": self.api_key, "SEARCH_IMAGE": IMAGE, "HOST_BIND": "127.0.0.1",
                  "HOST_PORT": str(self.port), "DEMO_ARGS": DEMO_ARGS, "BOOTSTRAP_ARGS": BOOTSTRAP_ARGS}  # fmt: skip
        return self.s.env_file(name, {**values, **extra})

    def run(self) -> None:
        step = self.clock.step
        profiles = self.opts.profiles.split()
        with step("engine"):
            engine = eng.setup(self.opts.engine, self.cache, self.log)
            self.stack = Stack(engine, PROJECT, REPO / "docker-compose.yml", self.run_dir, self.log)
        self.s.down_everything(self.env("cleanup.env"), [SOLO])  # what a killed earlier run left
        with step("base image"):
            base, how = base_image.resolve(
                engine, REPO / "Dockerfile", self.cache, self.log, self.opts.base_image
            )
            say(f"   {base}: {how}")
        with step("image build"):
            build.build_project(engine, REPO, base, IMAGE, self.cache, self.log, self.opts.torch_index_url)
        with step("image checks"):
            self.image_size = build.check_project_image(engine, IMAGE)
            say(f"   {IMAGE}: {self.image_size / 1e9:.2f} GB")
        self.single_container()
        self.compose_stack()
        if "redis" in profiles:
            with step("redis image build (Debian's redis-server on the same base)"):
                build.build_redis(engine, REPO, base, REDIS_IMAGE, self.log)
            self.redis_profile()
        if "milvus" in profiles:
            with step("milvus image build (PyPI's milvus package on the same base)"):
                build.build_milvus(engine, REPO, base, MILVUS_IMAGE, self.cache, self.log)
            self.milvus_profile()
        if self.opts.keep:
            say(f"--keep: the stack stays up on {self.base} (compose project {PROJECT})")
            return
        with step("compose down -v"):
            self.s.unwatch()
            self.s.compose(self.env("compose.env"), "down", "-v", profiles=profiles)
            left = engine.containers(PROJECT) + self.s.volumes()
            if left:
                raise Failure(f"compose down -v left {' '.join(left)}")
            say("   no container, no volume left")

    def single_container(self) -> None:
        step, e = self.clock.step, self.s.e
        bundles, data = f"{SOLO}-bundles", f"{SOLO}-data"
        with step("single container: bootstrap (small demo dataset + pipeline)"):
            volumes = ["-v", f"{data}:/data", "-v", f"{bundles}:/bundles"]
            e("run", "--rm", "--no-healthcheck", *volumes, IMAGE, "sh", "-c", SOLO_BOOTSTRAP,
              log=self.log, timeout=3600, what="single-container bootstrap")  # fmt: skip
        with step("single container: API healthy by the image's HEALTHCHECK, POST /search"):
            publish = ["-p", f"127.0.0.1:{self.port}:8000"]
            e("run", "-d", "--init", "--name", SOLO, *publish, "-v", f"{bundles}:/bundles", IMAGE,
              log=self.log, what="starting the API container")  # fmt: skip
            self.s.watch(SOLO)
            seconds = eng.wait_healthy(e, SOLO, "the API container")
            say(f"   healthy ({seconds:.0f} s)")
            http.search(self.base)
            self.s.unwatch()
            e("rm", "-f", "-v", SOLO, log=self.log)
            e("volume", "rm", bundles, data, log=self.log)

    def compose_stack(self) -> None:
        step, stack = self.clock.step, self.s
        env = self.env("compose.env")
        with step("compose up: bootstrap builds the demo dataset and the first bundle"):
            logs = stack.up(env, ["api", "worker"])
            if "building the demo dataset" not in logs:
                raise Failure("compose's bootstrap did not say it built the demo dataset (DATASET=pydocs)")
            say("   bootstrap built the demo dataset and published a bundle, exit 0")
        with step("compose: api and worker healthy (engine health checks)"):
            stack.healthy("api", "worker")
        with step("compose: POST /search"):
            self.version = http.search(self.base)
        with step("compose: reindex job over HTTP with the API key goes live"):
            job = http.submit_reindex(self.base, self.api_key, DATASET)
            self.version = http.wait_job_live(self.base, self.api_key, job, self.opts.job_timeout)
            http.wait_serving(self.base, self.version)
        with step("compose: restart api, same version served"):
            before = stack.started_at("api")
            stack.compose(env, "restart", "api")
            stack.wait_restarted("api", before, "compose restart api")
            stack.healthy("api")
            http.wait_serving(self.base, self.version, timeout=30)
        with step("compose: api server killed, the engine restarts it, same version served"):
            before = stack.started_at("api")
            # every process of the container's user but PID 1, the init, which then exits with the server
            stack.e("exec", stack.e.container(PROJECT, "api"), "sh", "-c", "kill -9 -1", check=False)
            stack.wait_restarted("api", before, "restart: unless-stopped after a crash")
            stack.healthy("api")
            http.wait_serving(self.base, self.version, timeout=30)

    def redis_profile(self) -> None:
        step, stack = self.clock.step, self.s
        env = self.env("compose-redis.env", SEARCH_QUEUE_URL="redis://redis:6379/0", REDIS_IMAGE=REDIS_IMAGE)
        with step("compose redis profile: up on the same volumes, all healthy"):
            stack.unwatch()
            stack.compose(env, "down")  # keeps the volumes: bundles, queue, data
            if "already live" not in stack.up(env, ["redis", "api", "worker"], profiles=["redis"]):
                raise Failure("bootstrap did not skip although a bundle was live")
            say("   bootstrap: a bundle is already live, nothing to do")
            stack.healthy("redis", "api", "worker")
            http.wait_serving(self.base, self.version, timeout=60)
        with step("compose redis profile: reindex job through Redis goes live"):
            job = http.submit_reindex(self.base, self.api_key, DATASET)
            self.version = http.wait_job_live(self.base, self.api_key, job, self.opts.job_timeout)
            http.wait_serving(self.base, self.version)
            keys = stack.e("exec", stack.e.container(PROJECT, "redis"), "redis-cli", "dbsize").stdout.strip()
            if not keys.isdigit() or int(keys) == 0:
                raise Failure(
                    f"the job went live but Redis holds no keys (dbsize {keys!r}): not the Redis queue"
                )
            say(f"   Redis holds {keys} keys (job records, queue)")

    def milvus_profile(self) -> None:
        with socket.socket() as s:  # Milvus is published on the host too (MILVUS_PORT); any free port
            s.bind(("127.0.0.1", 0))
            milvus_port = str(s.getsockname()[1])
        env = self.env("compose-milvus.env", SEARCH_INDEX_BACKEND="milvus", SEARCH_MILVUS_URI="http://milvus:19530",
                       MILVUS_IMAGE=MILVUS_IMAGE, MILVUS_PORT=milvus_port)  # fmt: skip
        MilvusStage(self.s, self.clock, env, self.base, self.api_key, DATASET, self.opts.job_timeout).run()


def main() -> int:
    os.chdir(REPO)
    smoke = Smoke(options(sys.argv[1:]))
    say(f"container-test: cache {smoke.cache}, commands and their output in {smoke.log}")
    failure = None
    try:
        smoke.run()
    except Failure as e:
        failure = str(e)
    except KeyboardInterrupt:
        failure = "interrupted"
    if smoke.stack is not None:
        smoke.stack.unwatch()
        if failure:
            smoke.stack.report_failure([SOLO])
            if not smoke.opts.keep:
                smoke.stack.down_everything(smoke.env("cleanup.env"), [SOLO])
    say("\nstep wall times:\n" + smoke.clock.table())
    if smoke.image_size:
        say(f"image {IMAGE}: {smoke.image_size / 1e9:.2f} GB")
    if failure:
        say(f"container-test: FAIL: {failure}")
        return 1
    # the plain closing line CI reads, after pytest's: every step is a check that passed
    say(f"container-test: {len(smoke.clock.steps)} passed, 0 failed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
