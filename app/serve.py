"""`python -m app.serve [uvicorn options]`: the API with its worker count and threads chosen for this machine.

Reads the settings (SEARCH_* variables), chooses the number of worker processes and the encoder's
intra-op threads from the cores and the live bundle's query encoders (app/engine/serving_plan.py), logs
the choice, hands it to the workers (SEARCH_SERVING_PLAN, shown in GET /bundles as `serving`;
SEARCH_ENCODER_THREADS unless set), and runs uvicorn with `--factory app.main:create_app --workers N`.
Other uvicorn options pass through (`--host`, `--port`, … or their UVICORN_* variables); the worker count
is SEARCH_WORKERS (0 = chosen), so `--workers` is refused here.
"""

from __future__ import annotations

import logging
import os
import sys

from app.engine.serving_plan import choose
from app.settings import Settings
from contract.log_setup import configure_logging

logger = logging.getLogger("app.serve")  # run as __main__: the name the log setup configures, not "__main__"


def main(argv: list[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    if any(a == "--workers" or a.startswith("--workers=") for a in args):
        raise SystemExit(
            "python -m app.serve: set the worker count with SEARCH_WORKERS (0 = chosen), not --workers"
        )
    settings = Settings()
    configure_logging(settings.log_level, settings.log_format)
    plan = choose(settings)
    logger.info(
        "serving with %d worker(s) x %d encoder thread(s) on %d core(s): %s",
        plan.workers,
        plan.encoder_threads,
        plan.cores,
        plan.reason,
    )
    # the workers read these through Settings (spawned processes inherit the environment)
    os.environ["SEARCH_SERVING_PLAN"] = plan.to_json()
    os.environ["SEARCH_ENCODER_THREADS"] = str(plan.encoder_threads)
    # FAISS's OpenMP threads for batched searches: no more than the process's share of the cores
    os.environ.setdefault("OMP_NUM_THREADS", str(plan.encoder_threads))
    from uvicorn.main import main as uvicorn_main

    from app.worker_sockets import spread_connections

    if plan.workers > 1:
        spread_connections()  # one socket per worker: a burst of new connections is split, not drained by one

    uvicorn_main.main(
        args=["--factory", "app.main:create_app", "--workers", str(plan.workers), *args],
        prog_name="python -m app.serve",
    )


if __name__ == "__main__":
    main()
