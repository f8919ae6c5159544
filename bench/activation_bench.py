"""Activation time against the size of the mutation log, when the activated version has another encoder.

    flock "$BENCH_LOCK" .venv/bin/python -u bench/activation_bench.py [--docs 200] [--logged 0 250 1000]

Two versions of one --docs scifact bundle (fairness_bench.bundle, cached under var/bench/): the second
with another encoder identity (its similarity.json's temperature differs, so the vectors are the same but
`encoder_key` is not, as after a retrain). For each --logged size, a fresh bundles folder and the real app
(in-process, lifespan, torch encoder): that many scifact abstracts are upserted while the first version
serves, then POST /bundles/{v}/activate is timed three times, second → first → second:

- cold: the second version's first activation re-encodes every logged document (what every activation
  that changed the encoder cost before issue 27);
- back: the first version again (its rows were written with its encoder: nothing to encode);
- warm: the second version again: its vectors are kept in the log (contract/mutations/log.py), so it
  re-encodes nothing.

The ratio warm / cold is printed per size. Client and server share the CPU (2 cores).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO))

from fairness_bench import SCIFACT  # noqa: E402
from fairness_bench import bundle as template  # noqa: E402  (the cached base-model scifact bundle)

KEY = {"X-API-Key": "bench"}


def versions(src: Path, dst: Path) -> tuple[str, str]:
    """dst gets src's live version (hard links) and a copy of it with another encoder identity."""
    from contract.bundles.bundle import checksums, new_version_id

    first = (src / "CURRENT").read_text().strip()
    shutil.copytree(src / first, dst / first, copy_function=os.link)
    (dst / "CURRENT").write_text(first + "\n")
    second = new_version_id()
    shutil.copytree(src / first, dst / second, copy_function=os.link)
    sim = dst / second / "model" / "similarity.json"
    data = json.loads(sim.read_text()) | {"temperature": 0.07}
    sim.unlink()  # a hard link: never write through it
    sim.write_text(json.dumps(data))
    manifest = json.loads((dst / second / "manifest.json").read_text())
    manifest |= {"version": second, "files": checksums(dst / second)}
    (dst / second / "manifest.json").unlink()
    (dst / second / "manifest.json").write_text(json.dumps(manifest))
    for name in ("gate.json", "README.md"):  # sealed by the first publication: the copy has none
        (dst / second / name).unlink(missing_ok=True)
    return first, second


def abstracts(skip: int, n: int) -> list[dict[str, str]]:
    from training.data.beir import load_corpus

    docs = list(load_corpus(SCIFACT / "corpus.jsonl").values())[skip : skip + n]
    return [{"id": f"bench-{d.id}", "title": d.title, "text": d.text[:1000]} for d in docs]


def run(n_docs: int, logged: int) -> tuple[float, float, float]:
    from fastapi.testclient import TestClient

    from app.main import create_app
    from app.settings import Settings

    with tempfile.TemporaryDirectory(prefix="activation-bench-") as tmp:
        bundles = Path(tmp) / "bundles"
        first, second = versions(template(n_docs), bundles)
        settings = Settings(
            bundles_dir=bundles, api_key=KEY["X-API-Key"], reload_poll_seconds=0, encoder_backend="torch",
            max_document_chars=1000, query_cache_size=0,
        )  # fmt: skip
        with TestClient(create_app(settings)) as client:
            docs = abstracts(n_docs, logged)
            for i in range(0, len(docs), 64):
                r = client.post("/documents", json={"documents": docs[i : i + 64]}, headers=KEY)
                assert r.status_code == 200, r.text
            times = []
            for version in (second, first, second):
                t0 = time.perf_counter()
                r = client.post(f"/bundles/{version}/activate", headers=KEY)
                times.append(time.perf_counter() - t0)
                assert r.status_code == 200, r.text
            return times[0], times[1], times[2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=int, default=200, help="documents in the bundle")
    parser.add_argument("--logged", type=int, nargs="+", default=[0, 250, 1000], help="log sizes")
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    print(f"{'logged docs':>11}  {'cold s':>7}  {'back s':>7}  {'warm s':>7}  warm/cold")
    for n in args.logged:
        cold, back, warm = run(args.docs, n)
        print(f"{n:>11}  {cold:7.2f}  {back:7.2f}  {warm:7.2f}  {warm / cold:9.2f}", flush=True)
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
