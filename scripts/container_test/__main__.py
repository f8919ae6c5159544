"""Container smoke test (`make container-test`): the image and the compose stack, run for real.

From a clean clone, offline but for the package registries: gets an engine (docker when its daemon
answers, else podman, installed from the Debian archive when missing), a base image (pulled, or made
with mmdebstrap when no registry answers), builds the image, then
  1. single container: the bootstrap pipeline on a small demo dataset, then the API from the image's
     default command, healthy through the image's own HEALTHCHECK, answering POST /search;
  2. the compose stack with an env file as a user writes it (API key, demo dataset): bootstrap exits 0,
     api and worker turn healthy through the engine's health checks, POST /search answers, a reindex
     job submitted over HTTP with the API key goes live and is served, a restart of the api container
     keeps serving that version;
  3. the redis profile (Redis built from the Debian archive on the same base): the stack again on the
     same volumes with the Redis queue: bootstrap skips, redis/api/worker healthy, a job through
     Redis goes live;
  4. `down -v` removes every container and volume.
Each step prints its wall time; a failure ends the run with one line, `container-test: FAIL: <why>`,
and exit status 1. Nothing is skipped.

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
from proc import Clock, Failure, run, say

REPO = Path(__file__).resolve().parents[2]
DATASET = "pydocs"  # the demo dataset compose's bootstrap builds (docker-compose.yml)
# the demo recipe, shortened: the smoke test proves the stack, not the model
BOOTSTRAP_ARGS = "--max-steps 8"
SOLO_BOOTSTRAP = (
    "python -m training demo-data --out /data/pydocs --docs 300 --test-queries 60"
    " && python -m training pipeline --data /data/pydocs --bundles /bundles --quiet"
    " --epochs 1 --max-steps 4 --hard-negatives 0 --max-seq-length 64 --no-onnx"
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def options(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python3 scripts/container_test", description=__doc__.split("\n\n")[0] if __doc__ else None
    )
    parser.add_argument("--engine", choices=["auto", "docker", "podman"], default="auto",
                        help="auto: docker when its daemon answers (docker info), else podman")  # fmt: skip
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "infonce-search" / "container-test",
                        help="base rootfs, tools, pip config, env files and the command log; the engine "
                        "keeps the image layers (default: %(default)s)")  # fmt: skip
    parser.add_argument(
        "--profiles", default="redis", help="compose profiles to run too, space-separated ('' for none)"
    )
    parser.add_argument("--base-image", help="BASE_IMAGE for the build (default: the Dockerfile's, pulled, "
                        "else Debian made with mmdebstrap)")  # fmt: skip
    parser.add_argument("--torch-index-url", help="TORCH_INDEX_URL for the build (default: the CPU wheel index "
                        "when reachable, else the host's pip index with its find-links)")  # fmt: skip
    parser.add_argument("--job-timeout", type=float, default=1200, help="seconds a reindex job may take")
    parser.add_argument(
        "--keep", action="store_true", help="leave the compose stack up at the end (no down -v)"
    )
    return parser.parse_args(argv)


class Smoke:
    def __init__(self, opts: argparse.Namespace) -> None:
        self.opts = opts
        self.cache = Path(opts.cache)
        self.profiles = opts.profiles.split()
        self.keep = opts.keep
        self.project = "infonce-smoke"
        self.image = "localhost/infonce-search:container-test"
        self.redis_image = "localhost/infonce-search-redis:container-test"
        self.run_dir = self.cache / "run"
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.log = self.run_dir / "commands.log"
        self.log.write_text("")
        self.clock = Clock()
        self.drivers: list[eng.HealthDriver] = []
        self.engine: eng.Engine | None = None
        self.api_key = secrets.token_urlsafe(24)
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.image_size = 0
        self.version = ""  # the bundle version the API must be serving

    # -- helpers -----------------------------------------------------------------------------------

    @property
    def e(self) -> eng.Engine:
        assert self.engine is not None
        return self.engine

    def env_file(self, name: str, **extra: str) -> Path:
        """The `.env` a user writes (docs/deploy.md): the API key, the image, where to publish."""
        values = {
            "SEARCH_API_KEY": self.api_key,
            "SEARCH_IMAGE": self.image,
            "HOST_BIND": "127.0.0.1",
            "HOST_PORT": str(self.port),
            "BOOTSTRAP_ARGS": BOOTSTRAP_ARGS,
            **extra,
        }
        path = self.run_dir / name
        path.write_text("".join(f"{k}={v}\n" for k, v in values.items()))
        return path

    def compose(
        self,
        env_file: Path,
        *args: str,
        profiles: list[str] | None = None,
        timeout: float = 600,
        check: bool = True,
    ) -> None:
        """The compose tool on the repo's docker-compose.yml, as this run's project, with an env file."""
        cmd = [
            *self.e.compose,
            "-p",
            self.project,
            "-f",
            str(REPO / "docker-compose.yml"),
            "--env-file",
            str(env_file),
        ]
        cmd += [flag for p in profiles or [] for flag in ("--profile", p)]
        run([*cmd, *args], log=self.log, timeout=timeout, check=check, what=f"compose {args[0]}")

    def watch(self, *containers: str) -> None:
        """Podman without systemd: start running their health checks (docker's daemon does it itself)."""
        watched = {d.container for d in self.drivers}
        if self.e.name == "podman":
            for container in set(containers) - watched:
                driver = eng.HealthDriver(self.e, container)
                driver.start()
                self.drivers.append(driver)

    def unwatch(self) -> None:
        for driver in self.drivers:
            driver.stop.set()
        self.drivers.clear()

    def healthy(self, *services: str) -> None:
        containers = {s: self.e.container(self.project, s) for s in services}
        self.watch(*containers.values())
        for service, container in containers.items():
            seconds = eng.wait_healthy(self.e, container, service)
            say(f"   {service}: healthy ({seconds:.0f} s after the wait began)")

    def bootstrap_exit(self) -> str:
        """compose's bootstrap ran to the end with status 0 (podman-compose does not check the status)."""
        container = self.e.container(self.project, "bootstrap")
        self.e("wait", container, timeout=3600, what="waiting for bootstrap")
        code = self.e.inspect(container)["State"]["ExitCode"]
        logs = self.e.logs(container, 200)
        if code != 0:
            say(logs)
            raise Failure(f"compose's bootstrap exited {code}")
        return logs

    # -- the steps ---------------------------------------------------------------------------------

    def run(self) -> None:
        step = self.clock.step
        with step("engine"):
            self.engine = eng.setup(self.opts.engine, self.cache, self.log)
        self.down_everything()  # what a killed earlier run may have left
        with step("base image"):
            base, how = base_image.resolve(
                self.e, REPO / "Dockerfile", self.cache, self.log, self.opts.base_image
            )
            say(f"   {base}: {how}")
        with step("image build"):
            build.build_project(
                self.e, REPO, base, self.image, self.cache, self.log, self.opts.torch_index_url
            )
        with step("image checks"):
            self.image_size = build.check_project_image(self.e, self.image)
            say(f"   {self.image}: {self.image_size / 1e9:.2f} GB")
        self.single_container()
        self.compose_stack()
        if "redis" in self.profiles:
            with step("redis image build (Debian's redis-server on the same base)"):
                build.build_redis(self.e, REPO, base, self.redis_image, self.log)
            self.redis_profile()
        if self.keep:
            say(f"CONTAINER_TEST_KEEP=1: the stack stays up on {self.base} (project {self.project})")
            return
        with step("compose down -v"):
            self.unwatch()
            self.compose(self.env_file("compose.env"), "down", "-v", profiles=self.profiles)
            left = self.e.containers(self.project) + self.volumes()
            if left:
                raise Failure(f"compose down -v left {' '.join(left)}")
            say("   no container, no volume left")

    def single_container(self) -> None:
        step = self.clock.step
        name, bundles, data = (
            f"{self.project}-solo",
            f"{self.project}-solo-bundles",
            f"{self.project}-solo-data",
        )
        with step("single container: bootstrap (small demo dataset + pipeline)"):
            volumes = ["-v", f"{data}:/data", "-v", f"{bundles}:/bundles"]
            self.e("run", "--rm", "--no-healthcheck", *volumes, self.image, "sh", "-c", SOLO_BOOTSTRAP,
                   log=self.log, timeout=3600, what="single-container bootstrap")  # fmt: skip
        with step("single container: API healthy by the image's HEALTHCHECK, POST /search"):
            publish = ["-p", f"127.0.0.1:{self.port}:8000"]
            self.e("run", "-d", "--init", "--name", name, *publish, "-v", f"{bundles}:/bundles", self.image,
                   log=self.log, what="starting the API container")  # fmt: skip
            self.watch(name)
            seconds = eng.wait_healthy(self.e, name, "the API container")
            say(f"   healthy ({seconds:.0f} s)")
            http.search(self.base)
            self.unwatch()
            self.e("rm", "-f", "-v", name, log=self.log)
            self.e("volume", "rm", bundles, data, log=self.log)

    def compose_stack(self) -> None:
        step = self.clock.step
        env = self.env_file("compose.env")
        with step("compose up: bootstrap builds the demo dataset and the first bundle"):
            self.compose(env, "up", "-d", "--no-build", timeout=3600)
            logs = self.bootstrap_exit()
            say("   bootstrap exited 0" + (", built the demo dataset" if "demo dataset" in logs else ""))
        with step("compose: api and worker healthy (engine health checks)"):
            self.healthy("api", "worker")
        with step("compose: POST /search"):
            self.version = http.search(self.base)
        with step("compose: reindex job over HTTP with the API key goes live"):
            job = http.submit_reindex(self.base, self.api_key, DATASET)
            self.version = http.wait_job_live(self.base, self.api_key, job, self.opts.job_timeout)
            http.wait_serving(self.base, self.version)
        with step("compose: restart api, same version served"):
            self.compose(env, "restart", "api")
            self.healthy("api")
            http.wait_serving(self.base, self.version, timeout=30)

    def redis_profile(self) -> None:
        step = self.clock.step
        env = self.env_file(
            "compose-redis.env", SEARCH_QUEUE_URL="redis://redis:6379/0", REDIS_IMAGE=self.redis_image
        )
        with step("compose redis profile: up on the same volumes, all healthy"):
            self.unwatch()
            self.compose(env, "down")  # keeps the volumes: bundles, queue, data
            self.compose(env, "up", "-d", "--no-build", profiles=["redis"], timeout=1800)
            if "already live" not in self.bootstrap_exit():
                raise Failure("bootstrap did not skip although a bundle was live")
            say("   bootstrap: a bundle is already live, nothing to do")
            self.healthy("redis", "api", "worker")
            http.wait_serving(self.base, self.version, timeout=60)
        with step("compose redis profile: reindex job through Redis goes live"):
            job = http.submit_reindex(self.base, self.api_key, DATASET)
            self.version = http.wait_job_live(self.base, self.api_key, job, self.opts.job_timeout)
            http.wait_serving(self.base, self.version)
            keys = self.e(
                "exec", self.e.container(self.project, "redis"), "redis-cli", "dbsize"
            ).stdout.strip()
            if not keys.isdigit() or int(keys) == 0:
                raise Failure(
                    f"the job went live but Redis holds no keys (dbsize {keys!r}): the queue was not Redis"
                )
            say(f"   Redis holds {keys} keys (job records, queue)")

    # -- cleanup -----------------------------------------------------------------------------------

    def volumes(self) -> list[str]:
        names = self.e("volume", "ls", "--format", "{{.Name}}").stdout.split()
        return [n for n in names if n.startswith((f"{self.project}_", f"{self.project}-"))]

    def down_everything(self) -> None:
        self.unwatch()
        self.compose(self.env_file("cleanup.env"), "down", "-v", profiles=["redis"], check=False)
        solo = f"{self.project}-solo"
        self.e("rm", "-f", "-v", solo, check=False, log=self.log)
        for volume in self.volumes():
            self.e("volume", "rm", "-f", volume, check=False, log=self.log)

    def report_failure(self) -> None:
        for container in self.e.containers(self.project) + [f"{self.project}-solo"]:
            if self.e("container", "inspect", container, check=False).returncode == 0:
                say(f"--- last lines of {container}:\n{self.e.logs(container, 15)}")


def main() -> int:
    os.chdir(REPO)
    smoke = Smoke(options(sys.argv[1:]))
    say(f"container-test: cache {smoke.cache}, log {smoke.log}")
    failure = None
    try:
        smoke.run()
    except Failure as e:
        failure = str(e)
    except KeyboardInterrupt:
        failure = "interrupted"
    smoke.unwatch()
    if failure and smoke.engine is not None:
        smoke.report_failure()
        if not smoke.keep:
            smoke.down_everything()
    say("\nstep wall times:\n" + smoke.clock.table())
    if smoke.image_size:
        say(f"image {smoke.image}: {smoke.image_size / 1e9:.2f} GB")
    if failure:
        say(f"container-test: FAIL: {failure}")
        return 1
    say("container-test: PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
