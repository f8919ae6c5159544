"""Where training runs: `--device auto|cpu|cuda`, and mixed precision on the accelerator.

auto = cuda when torch sees one, else cpu. On cuda the forward pass and the loss run under autocast:
bf16 where the GPU supports it (no loss scaling needed: bf16 has fp32's exponent range), else fp16 with a
GradScaler (Micikevicius et al. 2018, arXiv 1710.03740). On cpu nothing changes: fp32, no autocast, so
`--device cpu` and `auto` on a machine without a GPU give the same run.
"""

from __future__ import annotations

import logging
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any, Literal

import torch

from contract.errors import ConfigError

logger = logging.getLogger(__name__)

DeviceName = Literal["auto", "cpu", "cuda"]
DEVICES: tuple[str, ...] = ("auto", "cpu", "cuda")


def resolve_device(name: str) -> torch.device:
    """The torch device for `name`; ConfigError for an unknown name or cuda without a GPU."""
    if name not in DEVICES:
        raise ConfigError(f"--device: unknown device {name!r} (expected one of {', '.join(DEVICES)})")
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError("--device cuda: no CUDA device is available to torch (use --device auto or cpu)")
    return torch.device(name)


@dataclass
class Precision:
    """Autocast settings for one device, plus the grad scaler fp16 needs."""

    device: torch.device
    dtype: torch.dtype | None  # None: full fp32, no autocast
    scaler: Any = None  # torch.amp.GradScaler for fp16, else None

    def autocast(self) -> AbstractContextManager[Any]:
        if self.dtype is None:
            return nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.dtype)

    @property
    def name(self) -> str:
        return "fp32" if self.dtype is None else str(self.dtype).removeprefix("torch.")


def precision_for(device: torch.device) -> Precision:
    """bf16 autocast on a cuda device that supports it, fp16 + GradScaler on older ones, fp32 on cpu."""
    if device.type != "cuda":
        return Precision(device, None)
    if torch.cuda.is_bf16_supported():
        return Precision(device, torch.bfloat16)
    return Precision(device, torch.float16, torch.amp.GradScaler("cuda"))
