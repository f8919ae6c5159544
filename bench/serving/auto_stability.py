"""Does `auto` pick the same query encoder in several starts of one bundle, one of them beside a busy core?

    .venv/bin/python -m bench auto_stability [--bundles var/bundles] [--starts 3] [--loaded 2]

Reads the live bundle of --bundles (default: the demo's `default` collection, `make demo` builds it) and
runs `auto`'s choice (app/engine/encoder_choice.py) --starts times in this process; start number --loaded
(1-based) runs while another process spins on one core, as a start on a busy machine does. Each start
prints the choice two ways:

- `now`:    interleaved rounds, each candidate's fastest pass, a tie within TIE_BAND to the smaller
            nDCG@10 loss (what the service does);
- `before`: each candidate timed alone, best of 2 passes, one after the other, the fastest wins (the rule
            before issue 42).

Then whether each rule chose the same encoder in every start, and how far each candidate's timing moved
between the quiet starts and the loaded one (the spread the tie band must cover).
"""

from __future__ import annotations

import argparse
import multiprocessing
import time
from pathlib import Path
from typing import Any

from bench.harness.paths import REPO


def _spin(seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


def _start(bundle: Any, max_loss: float) -> dict[str, Any]:
    from app.engine.encoder_choice import choose_encoder_backend, load_encoder_backend, time_interleaved
    from contract.encoding.query_encoders import timing_queries

    chosen, _, record = choose_encoder_backend(bundle, max_ndcg_loss=max_loss)
    timed = {c["backend"]: c["ms_per_query"] for c in record["candidates"] if "ms_per_query" in c}
    queries = timing_queries(bundle.manifest.extras)[:32] or ["a query"]
    before: dict[str, float] = {}
    for name in timed:  # one after the other, best of 2: the old rule
        encoder = load_encoder_backend(bundle, name, max_ndcg_loss=max_loss)
        before[name] = time_interleaved({name: encoder}, queries, rounds=2)[name]["ms_per_query"]
    return {
        "now": chosen,
        "certainty": record["certainty"],
        "timed": timed,
        "before": min(before, key=before.__getitem__),
        "before_timed": before,
    }


def _print_start(i: int, loaded: bool, row: dict[str, Any]) -> None:
    label = "beside a busy core" if loaded else "quiet"
    print(f"start {i} ({label}): now -> {row['now']}   before -> {row['before']}")
    for name, ms in sorted(row["timed"].items(), key=lambda kv: kv[1]):
        print(f"    {name:18s} now {ms:8.3f} ms/query   before {row['before_timed'][name]:8.3f}")
    c = row["certainty"]
    print(
        f"    certainty: won {c.get('wins')}/{c['rounds']} rounds, runner-up {c.get('runner_up')} "
        f"x{c.get('runner_up_ratio')}, tied {c['tied']} ({c['rule']})",
        flush=True,
    )


def main(argv: list[str] | None = None) -> None:
    from contract.bundles.bundle import load_bundle
    from contract.defaults import MAX_NDCG_LOSS
    from training.bundle.store import BundleStore

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bundles", type=Path, default=REPO / "var" / "bundles")
    ap.add_argument("--starts", type=int, default=3)
    ap.add_argument("--loaded", type=int, default=2, help="which start runs beside a busy core (0: none)")
    ap.add_argument("--max-loss", type=float, default=MAX_NDCG_LOSS)
    args = ap.parse_args(argv)
    store = BundleStore(args.bundles)
    if store.current_version() is None:
        raise SystemExit(f"no live bundle in {args.bundles}: run `make demo` first, or pass --bundles")
    bundle = load_bundle(store.version_path(str(store.current_version())), mmap=True)
    print(f"bundle {bundle.version} of {args.bundles}, nDCG@10 budget {args.max_loss}", flush=True)
    rows = []
    for i in range(1, args.starts + 1):
        spinner = None
        if i == args.loaded:
            spinner = multiprocessing.Process(target=_spin, args=(600.0,), daemon=True)
            spinner.start()
        try:
            rows.append(_start(bundle, args.max_loss))
        finally:
            if spinner is not None:
                spinner.terminate()
        _print_start(i, spinner is not None, rows[-1])
    _summary(rows, args.loaded)


def _summary(rows: list[dict[str, Any]], loaded: int) -> None:
    for rule in ("now", "before"):
        chosen = [r[rule] for r in rows]
        print(f"{rule:6s}: {'the same' if len(set(chosen)) == 1 else 'NOT the same'} in every start {chosen}")
    if 0 < loaded <= len(rows):
        quiet = [r for i, r in enumerate(rows, 1) if i != loaded]
        busy = rows[loaded - 1]["timed"]
        for name, ms in sorted(busy.items()):
            base = min(r["timed"][name] for r in quiet if name in r["timed"])
            print(f"    {name:18s} loaded / quiet best pass: x{ms / base:.2f}")
