"""Read the Dockerfile and docker-compose.yml the way Docker does, so tests can run what the image runs."""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DOCKERFILE = REPO / "Dockerfile"
COMPOSE = REPO / "docker-compose.yml"


@dataclass(frozen=True)
class Instruction:
    keyword: str  # upper-case: FROM, RUN, ENV, ...
    args: str  # the rest, continuation lines joined
    stage: int  # 0-based index of the FROM it belongs to
    line: int  # 1-based line where it starts


def instructions(path: Path = DOCKERFILE) -> list[Instruction]:
    """Instructions with `\\` continuations joined and comment lines dropped (as BuildKit does)."""
    result: list[Instruction] = []
    stage = -1
    pending = ""
    start = 0
    for lineno, raw in enumerate(path.read_text().splitlines(), start=1):
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if pending and line.startswith("#"):
            continue  # comment lines inside a continued instruction are ignored
        if not pending:
            start = lineno
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        text = pending + line
        pending = ""
        keyword, _, args = text.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            stage += 1
        result.append(Instruction(keyword, args.strip(), stage, start))
    return result


def global_args(path: Path = DOCKERFILE) -> dict[str, str]:
    """Defaults of the ARGs declared before the first FROM (the ones FROM lines may use)."""
    args: dict[str, str] = {}
    for item in instructions(path):
        if item.keyword == "ARG" and item.stage == -1:
            name, _, default = item.args.partition("=")
            args[name.strip()] = default.strip()
    return args


def from_image(item: Instruction, path: Path = DOCKERFILE) -> str:
    """The image a FROM line names, with `${ARG}` / `$ARG` replaced by the global ARG's default."""
    image = item.args.split()[0]
    for name, default in global_args(path).items():
        image = image.replace("${" + name + "}", default).replace("$" + name, default)
    return image


def final_stage(path: Path = DOCKERFILE) -> list[Instruction]:
    items = instructions(path)
    last = max(i.stage for i in items)
    return [i for i in items if i.stage == last]


def _exec_form(args: str, where: str) -> list[str]:
    try:
        value = json.loads(args)
    except json.JSONDecodeError as exc:
        raise AssertionError(f"{where} must use the exec (JSON array) form, got {args!r}") from exc
    assert isinstance(value, list) and all(isinstance(v, str) for v in value), where
    return value


def dockerfile_cmd(path: Path = DOCKERFILE) -> list[str]:
    (cmd,) = [i for i in final_stage(path) if i.keyword == "CMD"]
    return _exec_form(cmd.args, f"{path.name}:{cmd.line} CMD")


def dockerfile_healthcheck(path: Path = DOCKERFILE) -> list[str]:
    (check,) = [i for i in final_stage(path) if i.keyword == "HEALTHCHECK"]
    _, _, command = check.args.partition("CMD ")
    return _exec_form(command.strip(), f"{path.name}:{check.line} HEALTHCHECK")


def healthcheck_options() -> dict[str, str]:
    (check,) = [i for i in final_stage() if i.keyword == "HEALTHCHECK"]
    options, _, _ = check.args.partition("CMD ")
    return dict(opt.removeprefix("--").split("=", 1) for opt in options.split())


def dockerfile_env() -> dict[str, str]:
    """ENV of the final stage, minus values that refer to other variables (PATH=/opt/venv/bin:$PATH)."""
    env: dict[str, str] = {}
    for item in final_stage():
        if item.keyword != "ENV":
            continue
        for pair in shlex.split(item.args):
            key, sep, value = pair.partition("=")
            assert sep, f"Dockerfile:{item.line}: use ENV KEY=VALUE, got {pair!r}"
            if "$" not in value:
                env[key] = value
    return env


def compose() -> dict[str, Any]:
    import yaml

    return yaml.safe_load(COMPOSE.read_text())


def compose_command(service: dict[str, Any]) -> list[str]:
    cmd = service.get("command")
    if cmd is None:
        return dockerfile_cmd()
    return cmd if isinstance(cmd, list) else shlex.split(cmd)


COMPOSE_VAR = re.compile(r"(?<!\$)\$\{([A-Z_][A-Z0-9_]*)")


def compose_variables() -> set[str]:
    """Every `${VAR...}` the compose file reads from the shell or `.env` (`$$` escapes excluded)."""
    return set(COMPOSE_VAR.findall(COMPOSE.read_text()))
