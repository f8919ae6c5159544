"""GET /bundles: the published versions, which one serves and which CURRENT names, gate decisions
(paged), the last failed load, unreadable versions and the mutation log's state — read for one
HotSwap (app/live/hot_swap.py) off the event loop. Also the gate log as /metrics reads it.
"""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

from app.engine import serving_plan
from app.engine.live_bundle import LiveBundle
from app.live.hot_swap import HotSwap
from app.schemas.bundles import BundleEntry, BundlesResponse, Unreadable
from contract.bundles.folder import GATE_LOG
from contract.encoding import spare_cores
from contract.index.half_scan import kept_by

logger = logging.getLogger(__name__)


async def describe(hot_swap: HotSwap, gate_limit: int = 50, gate_offset: int = 0) -> BundlesResponse:
    return await asyncio.to_thread(_describe, hot_swap, gate_limit, gate_offset)


def _describe(hot_swap: HotSwap, gate_limit: int = 50, gate_offset: int = 0) -> BundlesResponse:
    current = hot_swap.current_on_disk()
    live = hot_swap.live
    problems: list[tuple[str, str]] = []
    decisions = read_gate_log(hot_swap.folder.root)[::-1]  # newest first
    entries = [
        BundleEntry(
            version=info.version,
            live=live is not None and live.version == info.version,
            current=info.version == current,
            created_at=info.created_at.isoformat(),
            metrics=info.metrics,
            gate=info.gate.model_dump(mode="json") if info.gate else None,
            retrieval=info.retrieval,
            mutation_seq=info.mutation_seq,
        )
        for info in hot_swap.folder.list_versions(problems)
    ]
    return BundlesResponse(
        live=live.version if live else None,
        current=current,
        encoder_backend=live.encoder_backend if live else None,
        encoder_choice=live.choice if live else None,
        serving=serving_plan.describe(
            hot_swap.settings,
            spare_cores.usage(live.query_encoder) if live else None,
            _half_scan(live),
        ),
        versions=entries,
        gate_decisions=decisions[gate_offset : gate_offset + gate_limit],
        gate_total=len(decisions),
        last_failed_load=hot_swap.last_failure,
        fallback_from=hot_swap.fallback_from,
        unreadable=[Unreadable(version=v, error=hot_swap.relative(e)) for v, e in problems],
        mutations=hot_swap.mutations.describe(live),
    )


def _half_scan(live: LiveBundle | None) -> dict[str, int] | None:
    half = kept_by(live.bundle.index) if live else None
    return half.usage() if half else None


def read_gate_log(root: Path) -> list[dict[str, Any]]:
    """Every readable record of <root>/gate.jsonl, oldest first (also read by /metrics)."""
    path = root / GATE_LOG
    if not path.is_file():
        return []
    records = []
    try:
        raw = path.read_bytes()
    except OSError as exc:
        logger.warning("%s is unreadable: %s", path, exc)
        return []
    # errors="replace": one bad byte must cost one line, not the whole listing
    for number, line in enumerate(raw.decode("utf-8", errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except (json.JSONDecodeError, RecursionError):  # a torn last line from a crash: skip it
            logger.debug("%s:%d: not JSON, skipped", path, number)
            continue
        if isinstance(record, dict):
            records.append(record)
    return records
