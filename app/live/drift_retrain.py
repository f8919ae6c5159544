"""SEARCH_RETRAIN_ON_DRIFT: a retrain that learns from the judgments, queued when the live risk drifts.

Evaluated where the verdict is computed, GET /generalization-gap (app/live/live_risk.py), not after each
feedback write: the verdict encodes every judged query against the whole index, which the section caches
per (version, judgment count), so judging it on every write would pay that encode per batch of judgments,
while a GET (a dashboard, the page's report tab, a monitor polling it) pays it once per new batch. The
cost of the choice: with nobody reading the report, nothing is queued; docs/jobs.md says so.

The rule: the verdict is `worse than predicted` (the section gives none below its minimum of judged
queries, contract/feedback/live_risk.py: MIN_QUERIES); no retrain of the collection is queued or running
(a person's included: it will train on the judgments too, unset `feedback` means include); and no drift
job was already queued for this live version at this judgment count (a candidate the gate refused leaves
the same verdict, and the same evidence must not queue the same job again). The check and the submit hold
a lock file in the bundles folder, so replicas sharing it queue one job, not one each.
"""

from __future__ import annotations

import fcntl
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from app.settings import Settings
from contract.errors import InfonceSearchError
from contract.jobs.queue import JobQueue
from contract.jobs.records import JobRecord

logger = logging.getLogger(__name__)

WORSE = "worse than predicted"
LOCK_FILE = ".drift-retrain.lock"
RECENT_JOBS = 1000  # records scanned for a queued or running retrain (newest first)


def maybe_retrain(
    section: dict[str, Any],
    settings: Settings,
    queue: JobQueue,
    *,
    version: str,
    collection: str,
    data_name: str | None,
) -> JobRecord | None:
    """The job queued for a drifted live risk, or None (off, no drift, one queued already, no dataset).
    `data_name`: the live bundle's dataset folder name, used when no job of the collection names one."""
    if not settings.retrain_on_drift or section.get("verdict") != WORSE:
        return None
    bundles_dir = Path(settings.bundles_dir)
    evidence = f"drift of {version} at {section.get('n_judgments')} judgments"
    with _folder_lock(bundles_dir):
        recent = [r for r in queue.recent(RECENT_JOBS) if r.collection == collection]
        busy = [r for r in recent if r.type == "retrain" and r.state in ("queued", "running")]
        if busy:
            logger.info(
                "drift: retrain %s of %s is %s already; none queued", busy[0].id, collection, busy[0].state
            )
            return None
        if any((r.reason or "").startswith(evidence) for r in recent):
            return None  # this evidence queued its job already (refused by the gate, or done)
        dataset = next((r.dataset for r in recent), data_name)
        if dataset is None:
            logger.warning(
                "drift: %s of collection %s, but no dataset to retrain on is known", WORSE, collection
            )
            return None
        risk, predicted = section.get("risk") or {}, section.get("predicted") or {}
        reason = (
            f"{evidence}: live risk {risk.get('value', float('nan')):.3f} "
            f"[{risk.get('ci_low', float('nan')):.3f}, {risk.get('ci_high', float('nan')):.3f}] over "
            f"{section.get('n_queries')} judged queries, above the predicted "
            f"[{predicted.get('ci_low', float('nan')):.3f}, {predicted.get('ci_high', float('nan')):.3f}]"
        )
        try:
            record = queue.submit(
                "retrain",
                dataset,
                {"feedback": "include"},
                data_root=settings.data_root,
                bundles_dir=bundles_dir,
                models_root=settings.models_root,
                collection=collection,
                reason=reason,
            )
        except InfonceSearchError as exc:  # the report still answers; the log says why nothing was queued
            logger.error("drift: could not queue a retrain of %s on %s: %s", collection, dataset, exc)
            return None
    logger.warning("drift: queued retrain %s of collection %s (%s)", record.id, collection, reason)
    return record


@contextmanager
def _folder_lock(bundles_dir: Path) -> Iterator[None]:
    bundles_dir.mkdir(parents=True, exist_ok=True)
    with open(bundles_dir / LOCK_FILE, "a+") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
