"""The compose stack as one project: its env files, compose commands, health checks, restarts, cleanup."""

from __future__ import annotations

import time
from pathlib import Path

import engine as eng
from proc import Failure, run, say


class Stack:
    def __init__(self, engine: eng.Engine, project: str, compose_file: Path, run_dir: Path, log: Path):
        self.e = engine
        self.project = project
        self.compose_file = compose_file
        self.run_dir = run_dir
        self.log = log
        self.drivers: list[eng.HealthDriver] = []

    def env_file(self, name: str, values: dict[str, str]) -> Path:
        """An env file as a user writes one (docs/deploy.md), passed with --env-file."""
        path = self.run_dir / name
        path.write_text("".join(f"{k}={v}\n" for k, v in values.items()))
        return path

    def compose(
        self,
        env: Path,
        *args: str,
        profiles: list[str] | None = None,
        timeout: float = 600,
        check: bool = True,
    ) -> str:
        """The compose tool on docker-compose.yml as this project; returns its output."""
        cmd = [*self.e.compose, "-p", self.project, "-f", str(self.compose_file), "--env-file", str(env)]
        cmd += [flag for p in profiles or [] for flag in ("--profile", p)]
        result = run([*cmd, *args], log=self.log, timeout=timeout, check=check, what=f"compose {args[0]}")
        return str(result.stdout)

    def up(self, env: Path, services: list[str], profiles: list[str] | None = None) -> str:
        """Bring the stack up as docs/deploy.md tells users to; returns bootstrap's output.

        docker: `up -d`; compose runs bootstrap first and starts the others once it exited 0.
        podman: podman-compose turns depends_on into podman's --requires, and podman then refuses to
        restart api or worker while the one-off bootstrap is exited, both `podman restart` and the
        restart policy after a crash ("some dependencies ... are not started"); podman-compose also
        starts them whatever bootstrap's exit status. So bootstrap runs on its own (`run --rm`, whose
        exit status is bootstrap's) and the services come up with --no-deps. Bootstrap's `run` takes
        --no-deps too: its only dependency, milvus, is outside the default profile, and podman-compose
        1.6.0 `run` refuses one it does not know ("missing services [milvus]", `required: false` or
        not); the milvus stage brings Milvus up healthy first.
        """
        if self.e.name == "docker":
            self.compose(env, "up", "-d", "--no-build", profiles=profiles, timeout=1800)
            return self.bootstrap_exit()
        output = self.compose(
            env, "run", "--rm", "-T", "--no-deps", "bootstrap", profiles=profiles, timeout=1800
        )
        self.compose(env, "up", "-d", "--no-build", "--no-deps", *services, profiles=profiles)
        return output

    def bootstrap_exit(self) -> str:
        """docker compose's bootstrap container ran to the end with status 0; its output."""
        container = self.e.container(self.project, "bootstrap")
        self.e("wait", container, timeout=1800, what="waiting for bootstrap")
        code = self.e.inspect(container)["State"]["ExitCode"]
        logs = self.e.logs(container, 100000)
        if code != 0:
            say(logs)
            raise Failure(f"compose's bootstrap exited {code}")
        return logs

    # -- health and restarts -----------------------------------------------------------------------

    def watch(self, *containers: str) -> None:
        """Podman without systemd: start running their health checks (docker's daemon does it itself)."""
        if self.e.name != "podman":
            return
        watched = {d.container for d in self.drivers}
        for container in dict.fromkeys(containers):
            if container not in watched:
                driver = eng.HealthDriver(self.e, container)
                driver.start()
                self.drivers.append(driver)

    def unwatch(self) -> None:
        for driver in self.drivers:
            driver.stop.set()
        self.drivers.clear()

    def healthy(self, *services: str) -> None:
        """Each service's container turns healthy through the engine's checks (Failure otherwise)."""
        containers = {s: self.e.container(self.project, s) for s in services}
        self.watch(*containers.values())
        for service, container in containers.items():
            seconds = eng.wait_healthy(self.e, container, service)
            say(f"   {service}: healthy ({seconds:.0f} s after the wait began)")

    def started_at(self, service: str) -> str:
        return str(self.e.inspect(self.e.container(self.project, service))["State"]["StartedAt"])

    def wait_restarted(self, service: str, before: str, what: str, timeout: float = 120) -> None:
        """The service's container started again since `before` (its StartedAt then)."""
        t0 = time.monotonic()
        while self.started_at(service) == before:
            if time.monotonic() - t0 > timeout:
                raise Failure(f"{what}: the {service} container was not started again within {timeout:.0f} s")
            time.sleep(1)
        say(f"   {service} started again after {time.monotonic() - t0:.0f} s")

    # -- cleanup -----------------------------------------------------------------------------------

    def volumes(self) -> list[str]:
        names = self.e("volume", "ls", "--format", "{{.Name}}").stdout.split()
        return [n for n in names if n.startswith((f"{self.project}_", f"{self.project}-"))]

    def down_everything(self, env: Path, extra_containers: list[str]) -> None:
        """Whatever an earlier or failed run left: containers, volumes, the network."""
        self.unwatch()
        self.compose(env, "down", "-v", profiles=["redis", "milvus"], check=False)
        for container in [*self.e.containers(self.project), *extra_containers]:
            self.e("rm", "-f", "-v", container, check=False, log=self.log)
        for volume in self.volumes():
            self.e("volume", "rm", "-f", volume, check=False, log=self.log)

    def report_failure(self, extra_containers: list[str]) -> None:
        for container in [*self.e.containers(self.project), *extra_containers]:
            if self.e("container", "inspect", container, check=False).returncode == 0:
                say(f"--- last lines of {container}:\n{self.e.logs(container, 15)}")
