"""The shared real `python -m training pipeline --quiet --json` run (ONNX on; tests/training/conftest.py),
then what a user does with its outputs:

- reads the model card and loads the model exactly as the card says (its code block, run verbatim from
  inside the model folder), for InfoNCE and for an AnInfoNCE similarity.json;
- reads the bundle card (gate decision, index recall, how to query);
- copies the published bundle to another folder, removes the original, and serves the copy;
- finds no absolute path of the building machine anywhere in the bundle;
- sees no `INFO root:` lines (onnxruntime's quantizer) or faiss loader noise on stderr.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[3]


def _card_code(card: str) -> str:
    (code,) = re.findall(r"```python\n(.*?)```", card, flags=re.S)
    return code


def _run_card_code(code: str, model_dirs: list[Path]) -> list[dict]:
    """The card's code verbatim, from inside each model folder (one interpreter, so torch loads once);
    also report the texts it embedded."""
    wrapper = (
        "import json, os, sys\ncode = sys.stdin.read()\n"
        "for folder in sys.argv[1:]:\n"
        "    os.chdir(folder)\n    ns = {}\n    exec(code, ns)\n"
        "    print('RESULT', json.dumps({'queries': ns['queries'], 'documents': ns['documents'], "
        "'scores': ns['scores'].tolist()}))"
    )
    done = subprocess.run(
        [sys.executable, "-c", wrapper, *map(str, model_dirs)],
        input=code,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return [json.loads(line[7:]) for line in done.stdout.splitlines() if line.startswith("RESULT ")]


def test_model_cards_are_true_and_their_code_loads_the_model(pipeline_run, tmp_path):
    from contract.encoding.encoder import Encoder

    bundle_model = pipeline_run["bundles"] / pipeline_run["version"] / "model"
    for card_file in (pipeline_run["run"] / "model" / "README.md", bundle_model / "README.md"):
        card = card_file.read_text()
        assert "sentence-transformers/all-MiniLM-L6-v2" not in card  # not the base model's card any more
        assert "InfoNCE" in card and "τ = 0.05 " in card and "similarity.json" in card
        assert "| ndcg@10 |" in card and "held-out" in card and "gap (held-out − training)" in card
        assert "batch_size = 4" in card and "max_steps = 2" in card
    code = _card_code((bundle_model / "README.md").read_text())

    aninfo = tmp_path / "aninfonce-model"  # the same folder with an AnInfoNCE similarity.json
    shutil.copytree(bundle_model, aninfo, ignore=shutil.ignore_patterns("onnx"))
    encoder = Encoder.load(bundle_model)
    lam = np.random.default_rng(0).uniform(0.5, 30.0, encoder.dim).round(4).tolist()
    (aninfo / "similarity.json").write_text(
        json.dumps({"metric": "aninfonce", "temperature": None, "lambda": lam})
    )
    cosine_out, aninfo_out = _run_card_code(code, [bundle_model, aninfo])

    # InfoNCE: the card's code gives the encoder's own cosine scores
    q, d = encoder.encode(cosine_out["queries"], kind="query"), encoder.encode(cosine_out["documents"])
    np.testing.assert_allclose(cosine_out["scores"], encoder.similarity_matrix(q, d), atol=1e-4)
    # AnInfoNCE: the same code applies sqrt(Lambda) and the learned similarity, as the encoder does
    anenc = Encoder.load(aninfo)
    assert anenc.metric == "aninfonce"
    q, d = anenc.encode(aninfo_out["queries"], kind="query"), anenc.encode(aninfo_out["documents"])
    np.testing.assert_allclose(aninfo_out["scores"], anenc.similarity_matrix(q, d), rtol=1e-4, atol=1e-3)
    assert not np.allclose(aninfo_out["scores"], q @ d.T, atol=1e-2)  # it is not plain cosine


def test_bundle_card_tells_gate_recall_and_how_to_query(pipeline_run):
    folder = pipeline_run["bundles"] / pipeline_run["version"]
    card = (folder / "README.md").read_text()
    gate = json.loads((folder / "gate.json").read_text())
    manifest = json.loads((folder / "manifest.json").read_text())
    assert pipeline_run["version"] in card
    assert "**accepted (made live)**" in card and gate["reason"] in card
    assert "recall@10 vs exact search" in card and manifest["index"]["factory"] in card
    assert f"| ndcg@10 | {manifest['metrics']['test']['ndcg@10']:.4f} |" in card
    assert "/search" in card and "/embed" in card and "load_bundle" in card
    # written at publication, and checksummed with gate.json since issue 27 (a damaged card is seen)
    assert "README.md" in manifest["files"] and "gate.json" in manifest["files"]


def _strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def test_published_bundle_names_no_absolute_path_of_the_building_machine(pipeline_run):
    from training.bundle.portable_paths import is_absolute_path

    folder = pipeline_run["bundles"] / pipeline_run["version"]
    assert (folder / "model" / "onnx" / "onnx_info.json").is_file()
    forbidden = {str(pipeline_run["root"]), str(REPO), sys.prefix, os.path.realpath(sys.prefix)}
    for file in folder.rglob("*"):
        if not file.is_file():
            continue
        raw = file.read_bytes()
        for path in forbidden:
            assert path.encode() not in raw, f"{file.relative_to(folder)} names {path}"
        if file.suffix == ".json":
            absolute = [s for s in _strings(json.loads(raw)) if is_absolute_path(s)]
            assert absolute == [], f"{file.relative_to(folder)}: {absolute}"
    report = json.loads((folder / "report" / "report.json").read_text())
    assert report["model"]["path"] == "model"


def test_a_copied_bundle_serves_from_its_new_folder(pipeline_run, tmp_path):
    from fastapi.testclient import TestClient

    from app.main import create_app
    from app.settings import Settings

    version = pipeline_run["version"]
    elsewhere = tmp_path / "another-machine" / "bundles"
    elsewhere.mkdir(parents=True)
    shutil.copytree(pipeline_run["bundles"] / version, elsewhere / version)
    (elsewhere / "CURRENT").write_text(version + "\n")
    moved_away = pipeline_run["bundles"].with_name("bundles-gone")
    pipeline_run["bundles"].rename(moved_away)  # nothing may still point at the building folder
    try:
        for backend in ("torch", "onnx-int8"):
            settings = Settings(bundles_dir=elsewhere, encoder_backend=backend, reload_poll_seconds=0)
            with TestClient(create_app(settings)) as client:
                assert client.get("/readyz").status_code == 200
                found = client.post("/search", json={"query": "cells and proteins", "top_k": 3}).json()
                assert found["version"] == version and len(found["results"][0]["hits"]) == 3
                gap = client.get("/generalization-gap").json()
                assert gap["report"]["model"]["path"] == "model"
    finally:
        moved_away.rename(pipeline_run["bundles"])


def test_pipeline_stderr_has_no_library_info_noise(pipeline_run):
    assert "INFO root:" not in pipeline_run["stderr"]
    assert "AVX2" not in pipeline_run["stderr"]
    assert "INFO training." in pipeline_run["stderr"]  # our own INFO lines still show


PROGRESS_BAR = re.compile(r"\d+%\||it/s\]|Loading weights|Writing model shards")


def assert_no_progress_bar(stderr: str) -> None:
    found = PROGRESS_BAR.search(stderr)
    assert found is None, stderr[max(0, found.start() - 300) : found.end() + 100]


def test_pipeline_json_and_quiet(pipeline_run):
    summary = json.loads(pipeline_run["stdout"])  # stdout is the JSON document alone
    assert summary["publish"] == {
        "version": pipeline_run["version"],
        "live": True,
        "reason": summary["publish"]["reason"],
    }
    assert 0 <= summary["tuned"]["ndcg@10"] <= 1 and "base" in summary and summary["seconds"] > 0
    assert "ONNX export + check" in summary["phase_seconds"]
    assert_no_progress_bar(pipeline_run["stderr"])


def test_index_no_onnx_json_quiet(pipeline_run):
    bundles = pipeline_run["root"] / "bundles-index"
    cmd = [
        sys.executable, "-m", "training", "index", "--model", str(pipeline_run["run"]),
        "--data", str(pipeline_run["data"]), "--bundles", str(bundles), "--index", "flat",
        "--no-onnx", "--quiet", "--json",
    ]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    assert result["live"] is True and (bundles / "CURRENT").read_text().strip() == result["version"]
    assert not (bundles / result["version"] / "model" / "onnx").exists()  # --no-onnx
    assert "onnx" not in json.loads((bundles / result["version"] / "manifest.json").read_text())["extras"]
    assert_no_progress_bar(done.stderr)
