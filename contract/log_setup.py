"""Logging of every process (CLI commands, the worker, the API): one place, one policy.

The root logger stays at WARNING and only the project's own loggers follow `--log-level` /
SEARCH_LOG_LEVEL. Libraries keep their chatter to themselves: onnxruntime's quantizer logs every node
it touches with `logging.info` on the *root* logger (36 `INFO root:` lines per `index` run), and
faiss's loader reports at INFO that it "could not load library with AVX2 support" when it simply
fell back to the generic build; both are noise at INFO and stay visible at WARNING and above.

`fmt="json"` writes one JSON object per line (time, level, logger, message, exception), for log
shippers. A dozen lines here rather than a dependency (python-json-logger) for four fields.
Import-light: the API imports it (no torch, no model code).
"""

from __future__ import annotations

import json
import logging
import os
import sys
from datetime import UTC, datetime
from typing import Literal

LogFormat = Literal["text", "json"]
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
PROJECT_LOGGERS = ("training", "contract", "app", "infonce_search")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
_HANDLER_NAME = "infonce-search"


class JsonFormatter(logging.Formatter):
    """One JSON object per record: {"time", "level", "logger", "message"[, "exception"]}."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


class _LibrariesAtWarning(logging.Filter):
    """Below WARNING, only our loggers' records: a library that sets its own logger to DEBUG (bm25s does
    at import, after this ran) would otherwise reach the handler, since the root's level does not apply
    to records propagated from a logger with a level of its own."""

    def __init__(self, ours: tuple[str, ...]):
        super().__init__()
        self.ours = ours

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING or record.name.split(".")[0] in self.ours


def configure_logging(
    level: str = "INFO", fmt: LogFormat = "text", *, datefmt: str | None = None, also: tuple[str, ...] = ()
) -> None:
    """Root at WARNING, the project's loggers (and `also`, e.g. the worker's huey) at `level`; one
    stderr handler in `fmt`.

    A root that already has handlers of someone else's (uvicorn's --log-config, pytest's capture) keeps
    them; our own handler is replaced, so calling this twice never doubles every line.
    """
    root = logging.getLogger()
    formatter = JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT, datefmt=datefmt)
    ours = [h for h in root.handlers if h.get_name() == _HANDLER_NAME]
    if ours or not root.handlers:
        for handler in ours:
            root.removeHandler(handler)
        handler = logging.StreamHandler()
        handler.set_name(_HANDLER_NAME)
        handler.addFilter(_LibrariesAtWarning((*PROJECT_LOGGERS, *also)))
        handler.setFormatter(formatter)
        root.addHandler(handler)
    root.setLevel(logging.WARNING)
    for name in (*PROJECT_LOGGERS, *also):
        logging.getLogger(name).setLevel(level.upper())


_bars = {"on": True}


def progress_bars_enabled() -> bool:
    """False after silence_progress_bars(): for code that shows bars of its own accord (the gap report)."""
    return _bars["on"]


def silence_progress_bars() -> None:
    """`--quiet`: no progress bar at all, ours or the libraries' (transformers' "Loading weights" and
    "Writing model shards", huggingface_hub's, every tqdm bar such as the report's "risk vs k").

    Call it before the command imports its libraries: tqdm reads TQDM_DISABLE when it is imported (the
    CLI imports torch, transformers and tqdm only once a command runs). The variables also reach
    subprocesses; transformers and huggingface_hub, when already imported, are switched off directly.
    """
    _bars["on"] = False
    os.environ["TQDM_DISABLE"] = "1"
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
    if "transformers" in sys.modules:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    if "huggingface_hub" in sys.modules:
        from huggingface_hub.utils import disable_progress_bars

        disable_progress_bars()
