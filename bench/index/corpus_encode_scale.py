"""The corpus encode of a full retrain at scale: docs/s per runtime, the race's pick, wall time and peak
memory at growing corpus sizes, and the projection to 1M documents.

    flock BENCH_LOCK .venv/bin/python -m bench corpus_encode_scale [--data DATA] [--sizes 2000,5000,15000]
        [--sample 1000] [--extra-runtime onnx-int8 --extra-sizes 2000,5000] [--out NAME]

DATA is a BEIR folder (default: the 15,000 installed-package docstrings of bench/training/packages_corpus.py,
built into var/bench/packages15k when absent). The encoder is the base all-MiniLM-L6-v2: a tuned model has
the same architecture, so the same cost per document. Steps, in the order a full retrain takes them
(training/train/trainer.py `finalize`):

1. the race: training.export.corpus_encoder.choose_corpus_encoder(choice="auto") on the test split, as the
   pipeline calls it (int8 is a candidate on every CPU since b2e7136), then the probe of fp32 and int8 ONNX
   once more, its table printed, to show what the quality guard says of int8 document vectors;
2. docs/s of each runtime (torch fp32, ONNX fp32, ONNX int8) on a seeded sample of `--sample` documents
   (the corpus's own length distribution), batch 32 as the pipeline's;
3. one fresh subprocess per size: the race's runtime (and `--extra-runtime` at `--extra-sizes`) encodes the first N documents through
   training.eval.evaluate.encode_corpus with an EmbeddingCache (the pipeline's call), while a thread reads
   /proc/self/status every 20 ms: resident memory (VmRSS) and its anonymous part (RssAnon: what the
   process allocated, not file pages the kernel can drop) before the encode and at their peak during it.

The projection to 1M documents is the race's seconds plus 1M / (docs/s at the largest size): linear, on
the same length distribution and the same cores. Output: bench/results/NAME.txt and NAME.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.harness.memory import status_bytes
from bench.harness.paths import CACHE, RESULTS
from contract.encoding.encoder import Encoder, default_model_path, document_text
from contract.encoding.onnx_encoder import OnnxQueryEncoder
from training.data.beir import load_beir

MILLION = 1_000_000
RUNTIMES = ("torch", "onnx", "onnx-int8")


class MemorySampler:
    """Peak VmRSS and RssAnon (MiB) of this process while running, read from /proc/self/status."""

    def __init__(self, every_s: float = 0.02):
        self.every_s = every_s
        self.peak = {"rss": 0.0, "anon": 0.0}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def now() -> dict[str, float]:
        return {"rss": status_bytes("self", "VmRSS") / 2**20, "anon": status_bytes("self", "RssAnon") / 2**20}

    def _run(self) -> None:
        while not self._stop.is_set():
            for key, value in self.now().items():
                self.peak[key] = max(self.peak[key], value)
            self._stop.wait(self.every_s)

    def __enter__(self) -> MemorySampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        for key, value in self.now().items():
            self.peak[key] = max(self.peak[key], value)


def document_encoder(model_dir: Path, runtime: str) -> Encoder:
    """The tuned-model stand-in with its documents encoded by `runtime`, as the race returns it."""
    import torch

    from training.export.corpus_encoder import OnnxCorpusEncoder

    encoder = Encoder.load(model_dir)
    if runtime == "torch":
        return encoder
    variant = "fp32" if runtime == "onnx" else "int8"
    onnx = OnnxQueryEncoder.load(model_dir, variant=variant, threads=torch.get_num_threads())
    return OnnxCorpusEncoder(encoder, onnx, variant)


def child(model_dir: Path, data_dir: Path, runtime: str, n: int) -> dict[str, Any]:
    """One size in a fresh process: the pipeline's corpus encode of the first `n` documents."""
    from training.eval.embedding_cache import EmbeddingCache
    from training.eval.evaluate import encode_corpus

    corpus = dict(list(load_beir(data_dir, "test").corpus.items())[:n])
    encoder = document_encoder(model_dir, runtime)
    encoder.encode([document_text(d.title, d.text) for d in list(corpus.values())[:8]])  # warm-up
    with tempfile.TemporaryDirectory() as cache_dir:
        before = MemorySampler.now()
        started = time.perf_counter()
        with MemorySampler() as memory:
            _, emb = encode_corpus(encoder, corpus, 32, False, cache=EmbeddingCache(cache_dir))
        wall = time.perf_counter() - started
    return {
        "documents": n,
        "runtime": runtime,
        "wall_s": round(wall, 2),
        "docs_per_s": round(n / wall, 2),
        "rss_before_mb": round(before["rss"], 1),
        "rss_peak_mb": round(memory.peak["rss"], 1),
        "anon_before_mb": round(before["anon"], 1),
        "anon_peak_mb": round(memory.peak["anon"], 1),
        "anon_growth_mb": round(memory.peak["anon"] - before["anon"], 1),
        "vectors_mb": round(emb.nbytes / 2**20, 1),
    }


def tokens_growth(model_dir: Path, data_dir: Path, sizes: list[int]) -> list[dict[str, float]]:
    """Anonymous memory of one OnnxQueryEncoder.encode call's tokenisation of the first N documents: what
    the corpus encode held when it gave the ONNX runtime the whole corpus in one call (before 8de5f20)."""
    onnx = OnnxQueryEncoder.load(model_dir, variant="fp32")
    corpus = load_beir(data_dir, "test").corpus
    texts = [document_text(d.title, d.text) for d in corpus.values()]
    rows = []
    for n in sizes:
        before = MemorySampler.now()["anon"]
        enc = onnx.tokenizer.encode_batch(texts[:n])  # padded to the longest, as OnnxQueryEncoder.encode
        ids = [[t for t, m in zip(e.ids, e.attention_mask, strict=True) if m] for e in enc]
        grown = MemorySampler.now()["anon"] - before
        rows.append(
            {"documents": n, "anon_growth_mb": round(grown, 1), "kb_per_doc": round(grown * 1024 / n, 1)}
        )
        del enc, ids
    return rows


def packages_corpus() -> Path:
    folder = CACHE / "packages15k"
    if not (folder / "corpus.jsonl").exists():
        from bench.training import packages_corpus as build

        build.main([str(folder)])
    return folder


def race(model_dir: Path, data_dir: Path) -> dict[str, Any]:
    """The pipeline's choice on this CPU, and the same probe with int8 forced in."""
    import torch

    from training.export.corpus_encoder import choose_corpus_encoder, cpu_has_vnni, probe
    from training.export.onnx_export import export_onnx

    data = load_beir(data_dir, "test")
    encoder = Encoder.load(model_dir)
    _, auto = choose_corpus_encoder(encoder, model_dir, data, choice="auto", seed=0)
    export_onnx(model_dir, quantize=True)
    threads = torch.get_num_threads()
    candidates = {v: OnnxQueryEncoder.load(model_dir, variant=v, threads=threads) for v in ("fp32", "int8")}
    with_int8 = probe(encoder, {"onnx": candidates["fp32"], "onnx-int8": candidates["int8"]}, data, seed=0)
    return {"vnni": cpu_has_vnni(), "auto": auto, "with_int8": with_int8}


def throughput(model_dir: Path, data_dir: Path, sample: int) -> dict[str, float]:
    """docs/s of each runtime on one seeded sample (batch 32), after a warm-up."""
    corpus = load_beir(data_dir, "test").corpus
    ids = list(corpus)
    picked = [ids[i] for i in np.random.default_rng(0).permutation(len(ids))[:sample]]
    texts = [document_text(corpus[d].title, corpus[d].text) for d in picked]
    rates = {}
    for runtime in RUNTIMES:
        encoder = document_encoder(model_dir, runtime)
        encoder.encode(texts[:16], kind="document")
        started = time.perf_counter()
        encoder.encode(texts, kind="document", batch_size=32)
        rates[runtime] = round(len(texts) / (time.perf_counter() - started), 2)
        print(f"  {runtime:<10} {rates[runtime]:7.1f} docs/s on {len(texts)} sampled documents", flush=True)
    return rates


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path)
    parser.add_argument("--sizes", default="2000,5000,15000")
    parser.add_argument("--sample", type=int, default=1000)
    parser.add_argument("--extra-runtime", choices=RUNTIMES, help="also measure this runtime's memory")
    parser.add_argument("--extra-sizes", default="2000,5000", help="at these sizes")
    parser.add_argument("--out", default="corpus_encode_scale")
    parser.add_argument("--child", nargs=4, metavar=("MODEL", "DATA", "RUNTIME", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        model, data, runtime, n = args.child
        print(json.dumps(child(Path(model), Path(data), runtime, int(n))))
        return
    data_dir = args.data or packages_corpus()
    sizes = [int(s) for s in args.sizes.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = Path(tmp) / "model"
        shutil.copytree(default_model_path(), model_dir)  # the packaged folder may be read-only
        print(f"corpus {data_dir.name}; all-MiniLM-L6-v2 (max 256 tokens), batch 32", flush=True)
        started = time.perf_counter()
        raced = race(model_dir, data_dir)
        print(f"race (auto, VNNI {raced['vnni']}): {json.dumps(raced['auto'])}", flush=True)
        print(f"probe with int8 forced in: {json.dumps(raced['with_int8']['candidates'])}", flush=True)
        print(f"  (setup + race {time.perf_counter() - started:.0f}s)", flush=True)
        tokens = tokens_growth(model_dir, data_dir, sizes)
        print(f"whole-corpus ONNX tokenisation (before 8de5f20): {json.dumps(tokens)}", flush=True)
        rates = throughput(model_dir, data_dir, args.sample)
        pick = str(raced["auto"]["chosen"])
        cells = [(pick, n) for n in sizes]
        if args.extra_runtime:
            cells += [(args.extra_runtime, int(n)) for n in args.extra_sizes.split(",")]
        rows = []
        for runtime, n in cells:
            out = subprocess.run(
                [sys.executable, "-m", "bench.index.corpus_encode_scale", "--child", str(model_dir),
                 str(data_dir), runtime, str(n)],
                check=True, capture_output=True, text=True,
            )  # fmt: skip
            rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
            print(f"  {json.dumps(rows[-1])}", flush=True)
    report(data_dir, raced, tokens, rates, rows, args)


def race_lines(raced: dict[str, Any]) -> list[str]:
    auto = raced["auto"]
    return [
        f"race on this CPU (VNNI: {raced['vnni']}): chosen {auto['chosen']} "
        f"({auto.get('reason') or auto.get('rule')}), {float(auto.get('seconds', 0.0)):.1f}s",
        "probe pool (256 documents, 64 queries), int8 forced in:",
        "| runtime | docs/s (probe) | speedup | nDCG@10 | loss vs torch |",
        "|---|---:|---:|---:|---:|",
        *(
            f"| {name} | {r['docs_per_s']:.1f} | {r['speedup']:.2f} | {r['ndcg@10']:.4f} | {r['ndcg_loss']:+.4f} |"
            for name, r in raced["with_int8"]["candidates"].items()
        ),
        f"with int8 and fp32 ONNX probed again, the race would pick: {raced['with_int8']['chosen']}",
    ]


def size_lines(rows: list[dict]) -> list[str]:
    return [
        "the pipeline's encode (training.eval.evaluate.encode_corpus + EmbeddingCache), one fresh process each:",
        "| runtime | documents | wall s | docs/s | RSS before → peak MB | anonymous before → peak MB | growth MB | vectors MB |",
        "|---|---:|---:|---:|---|---|---:|---:|",
        *(
            f"| {r['runtime']} | {r['documents']:,} | {r['wall_s']:.1f} | {r['docs_per_s']:.1f} | {r['rss_before_mb']:.0f} → "
            f"{r['rss_peak_mb']:.0f} | {r['anon_before_mb']:.0f} → {r['anon_peak_mb']:.0f} | "
            f"{r['anon_growth_mb']:.0f} | {r['vectors_mb']:.1f} |"
            for r in rows
        ),
    ]


def report(
    data_dir: Path,
    raced: dict[str, Any],
    tokens: list[dict],
    rates: dict[str, float],
    rows: list[dict],
    args: Any,
) -> None:
    race_s = float(raced["auto"].get("seconds", 0.0))
    last = [r for r in rows if r["runtime"] == raced["auto"]["chosen"]][-1]
    hours = (race_s + MILLION / last["docs_per_s"]) / 3600
    extra = (
        f" --extra-runtime {args.extra_runtime} --extra-sizes {args.extra_sizes}"
        if args.extra_runtime
        else ""
    )
    lines = [
        f"# python -m bench corpus_encode_scale --sizes {args.sizes} --sample {args.sample}{extra}"
        f"   ({data_dir.name}: 15,000 installed-package docstrings; all-MiniLM-L6-v2; this machine's 2 cores)",
        *race_lines(raced),
        "",
        "before 8de5f20 the corpus encode gave the encoder the whole corpus in one call; the ONNX runtime's "
        "tokenisation of it alone held (anonymous MB):",
        *(
            f"  {t['documents']:>6,} documents: {t['anon_growth_mb']:6.0f} MB ({t['kb_per_doc']:.1f} KB a document)"
            for t in tokens
        ),
        "",
        f"docs/s on a seeded sample of {args.sample} documents, batch 32:",
        *(f"  {name:<10} {rate:7.1f}" for name, rate in rates.items()),
        "",
        *size_lines(rows),
        "",
        f"1M documents, projected: {race_s:.0f}s race + 1,000,000 / {last['docs_per_s']:.1f} docs/s = {hours:.1f} h "
        "(linear; the same length distribution, these 2 cores under the load below)",
        f"load average at the end: {os.getloadavg()[0]:.1f}",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    (RESULTS / f"{args.out}.txt").write_text(text)
    result = {
        "race": raced,
        "onnx_tokens_before_fix": tokens,
        "sample_docs_per_s": rates,
        "sizes": rows,
        "projection_1m_hours": round(hours, 2),
    }
    (RESULTS / f"{args.out}.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
