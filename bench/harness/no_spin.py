"""The API with onnxruntime's intra-op spin-wait policy changed, for A/B runs only
(`python -m bench thread_cpu --spin off|always`): `uvicorn --factory bench.harness.no_spin:create_app`
(spin-wait off) or `bench.harness.no_spin:create_app_always` (spinning on between runs too). Not settings:
the serving default is the reason contract/encoding/onnx_encoder.py gives."""

from __future__ import annotations

from fastapi import FastAPI

from app.main import create_app as _create_app
from contract.encoding import onnx_encoder


def create_app() -> FastAPI:
    onnx_encoder.ALLOW_SPINNING = "0"  # before the lifespan loads any ONNX session
    return _create_app()


def create_app_always() -> FastAPI:
    onnx_encoder.STOP_SPINNING_BETWEEN_RUNS = "0"  # before the lifespan loads any ONNX session
    return _create_app()
