"""onnxruntime bulk encodes by token budget: seconds and peak resident memory against BATCH_TOKENS.

    .venv/bin/python -m bench onnx_batch_tokens [n=1100] [budgets=1000000,8192,2048,1024] [variants=fp32,int8]
        [shrink=on]   (shrink=on,off: also each cell without the arena shrunk after each run)

`OnnxQueryEncoder.encode_ids` batches texts sorted by token length and caps each batch at BATCH_TOKENS
tokens (rows × the batch's longest), besides `batch_size` rows. A batch of 64 documents of 256 tokens
holds every layer's attention for all 64 at once; this bench shows what the cap costs or saves. The
texts are the first n documents of the demo corpus (docstrings, up to 256 tokens: the shape of a corpus
encode) and the same number of short queries (the distillation teacher's shape). Each cell runs in a
fresh process, so its peak (VmHWM) is its own; budget 1000000 is no cap (batches of 64 rows).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.harness.memory import status_bytes
from bench.harness.usage import asked_for_help

BATCH = 64  # rows, as the corpus encode and the distillation teacher call it


def cell(model_dir: str, texts_file: str, variant: str, budget: int, shrink: str) -> None:
    """One measurement, in this (fresh) process: prints a JSON line."""
    from contract.encoding import onnx_encoder

    texts = json.loads(Path(texts_file).read_text())
    encoder = onnx_encoder.OnnxQueryEncoder.load(Path(model_dir), variant=variant)  # type: ignore[arg-type]
    onnx_encoder.BATCH_TOKENS = budget
    if shrink == "off":  # the run options encode_ids passes to a bulk encode
        onnx_encoder._shrinking = lambda: None
    encoder.encode(texts[:8])
    before = status_bytes("self", "VmRSS")
    started = time.perf_counter()
    encoder.encode(texts, batch_size=BATCH)
    seconds = time.perf_counter() - started
    peak = status_bytes("self", "VmHWM")
    print(json.dumps({"seconds": seconds, "peak_mb": peak / 2**20, "over_mb": (peak - before) / 2**20}))


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if asked_for_help(argv, __doc__):
        return
    if argv and argv[0] == "--cell":
        cell(argv[1], argv[2], argv[3], int(argv[4]), argv[5])
        return
    args = dict(a.split("=", 1) for a in argv)
    n = int(args.get("n", 1100))
    budgets = [int(b) for b in args.get("budgets", "1000000,8192,2048,1024").split(",")]
    variants = args.get("variants", "fp32,int8").split(",")
    shrinks = args.get("shrink", "on").split(",")
    import shutil

    from contract.encoding.encoder import default_model_path, document_text
    from training.data.beir import load_corpus, load_queries
    from training.data.demo_data import build_demo_dataset
    from training.export.onnx_export import export_onnx

    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        data = build_demo_dataset(tmp / "pydocs")
        docs = [document_text(d.title, d.text) for d in load_corpus(data / "corpus.jsonl").values()][:n]
        queries = list(load_queries(data / "queries.jsonl").values())[:n]
        model_dir = tmp / "model"
        shutil.copytree(default_model_path(), model_dir)  # the packaged folder may be read-only
        export_onnx(model_dir, quantize=True)
        print(
            f"all-MiniLM-L6-v2 ONNX, batches of {BATCH} rows, {len(docs)} demo documents / {len(queries)} queries"
        )
        print(
            "| texts | variant | BATCH_TOKENS | arena shrunk | seconds | × first row | peak RSS MB "
            "| over the loaded model MB |"
        )
        print("|---|---|---:|---|---:|---:|---:|---:|")
        for kind, texts in (("documents", docs), ("queries", queries)):
            texts_file = tmp / f"{kind}.json"
            texts_file.write_text(json.dumps(texts))
            for variant in variants:
                base = None
                for budget in budgets:
                    for shrink in shrinks:
                        out = subprocess.run(
                            [sys.executable, "-m", "bench", "onnx_batch_tokens", "--cell",
                             str(model_dir), str(texts_file), variant, str(budget), shrink],
                            check=True, capture_output=True, text=True,
                        )  # fmt: skip
                        got = json.loads(out.stdout.strip().splitlines()[-1])
                        base = base or got["seconds"]
                        shown = "none" if budget >= 1_000_000 else f"{budget:,}"
                        print(
                            f"| {kind} | {variant} | {shown} | {shrink} | {got['seconds']:.2f} "
                            f"| {got['seconds'] / base:.2f} | {got['peak_mb']:,.0f} | {got['over_mb']:,.0f} |",
                            flush=True,
                        )


if __name__ == "__main__":
    main()
