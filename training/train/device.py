"""Where training runs: `--device auto|cpu|cuda`, and mixed precision on the accelerator.

auto = cuda when torch sees one, else cpu. On cuda the forward pass and the loss run under autocast:
bf16 where the GPU supports it (no loss scaling needed: bf16 has fp32's exponent range), else fp16 with a
GradScaler (Micikevicius et al. 2018, arXiv 1710.03740). On cpu: fp32, unless `cpu_bf16` turns bf16
autocast on (auto: only where the CPU has native bf16, AVX512-BF16 or AMX; elsewhere torch emulates it and
a step gets slower, not faster). Master weights, gradients and the loss stay fp32 either way, as on cuda.
`Precision.why` says what ran and why; timings.json records it.
"""

from __future__ import annotations

import logging
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
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
    why: str = ""  # what chose this precision (timings.json's `precision_why`)

    def autocast(self) -> AbstractContextManager[Any]:
        if self.dtype is None:
            return nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.dtype)

    @property
    def name(self) -> str:
        return "fp32" if self.dtype is None else str(self.dtype).removeprefix("torch.")


NATIVE_BF16_FLAGS = ("avx512_bf16", "amx_bf16")  # /proc/cpuinfo flags of CPUs that compute bf16 natively


def native_cpu_bf16(cpuinfo: str | Path = "/proc/cpuinfo") -> str | None:
    """The CPU flag that makes bf16 native here (avx512_bf16, amx_bf16), or None (emulated, or unknown:
    no /proc/cpuinfo off Linux)."""
    try:
        flags = set(Path(cpuinfo).read_text().split())
    except OSError:
        return None
    return next((f for f in NATIVE_BF16_FLAGS if f in flags), None)


def precision_for(device: torch.device, cpu_bf16: str) -> Precision:
    """bf16 autocast on a cuda device that supports it, fp16 + GradScaler on older ones; on cpu fp32, or
    bf16 autocast as `cpu_bf16` says (auto|on|off; auto = on only with native bf16)."""
    if device.type == "cuda":
        if torch.cuda.is_bf16_supported():
            return Precision(device, torch.bfloat16, why="cuda: bf16 supported")
        return Precision(device, torch.float16, torch.amp.GradScaler("cuda"), why="cuda: no bf16, fp16")
    native = native_cpu_bf16()
    cpu = native or f"no native bf16 ({torch.backends.cpu.get_cpu_capability().lower()})"
    if cpu_bf16 == "on" or (cpu_bf16 == "auto" and native):
        return Precision(device, torch.bfloat16, why=f"cpu_bf16={cpu_bf16}: {cpu}")
    return Precision(device, None, why=f"cpu_bf16={cpu_bf16}: {cpu}")
