"""The API with onnxruntime's intra-op spin-wait off, for A/B runs only (`python -m bench thread_cpu --no-spin`):
`uvicorn --factory bench.harness.no_spin:create_app`. Not a setting: the serving default stays on, for the
reason contract/encoding/onnx_encoder.py gives."""

from __future__ import annotations

from fastapi import FastAPI

from app.main import create_app as _create_app
from contract.encoding import onnx_encoder


def create_app() -> FastAPI:
    onnx_encoder.ALLOW_SPINNING = "0"  # before the lifespan loads any ONNX session
    return _create_app()
