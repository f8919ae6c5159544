"""`--device auto|cpu|cuda`: auto on a CPU machine is the cpu run, step for step; cuda is checked on a GPU."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from contract.config import TrainConfig
from contract.errors import ConfigError
from training.data.demo_data import build_demo_dataset
from training.train.device import native_cpu_bf16, precision_for, resolve_device
from training.train.phase_timer import PhaseTimer
from training.train.run_hooks import RunHooks
from training.train.trainer import train

QUIET = RunHooks(show_progress=False)

NO_GPU = not torch.cuda.is_available()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory):
    return build_demo_dataset(tmp_path_factory.mktemp("device") / "pydocs", n_docs=30, n_test=6)


def tiny_config(device: str) -> TrainConfig:
    return TrainConfig(
        device=device,
        max_steps=2,
        batch_size=4,
        max_seq_length=32,
        hard_negatives=0,
        report=False,
        eval_max_queries=4,
        seed=7,
    )


def losses(run) -> list[float]:
    return [json.loads(line)["loss"] for line in (run / "train_log.jsonl").read_text().splitlines()]


def test_resolve_device():
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("auto") == torch.device("cuda" if torch.cuda.is_available() else "cpu")
    assert precision_for(torch.device("cpu"), "off").dtype is None  # fp32 on cpu, no autocast
    with pytest.raises(ConfigError, match="unknown device 'tpu'"):
        resolve_device("tpu")


@pytest.mark.skipif(not NO_GPU, reason="a GPU is present: cuda is a valid device here")
def test_cuda_without_a_gpu_is_a_one_line_error(tmp_path, tiny):
    with pytest.raises(ConfigError, match="no CUDA device"):
        resolve_device("cuda")
    cmd = [sys.executable, "-m", "training", "train", "--data", str(tiny), "--out", str(tmp_path / "o"),
           "--device", "cuda", "--quiet"]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2
    assert "--device cuda: no CUDA device" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "o").exists()  # refused before any work


@pytest.mark.skipif(not NO_GPU, reason="auto means cuda on this machine, so it cannot equal the cpu run")
def test_cpu_and_auto_train_identically_on_a_cpu_machine(tmp_path, tiny):
    cpu = train(tiny_config("cpu"), tiny, tmp_path / "cpu", hooks=QUIET)
    auto = train(tiny_config("auto"), tiny, tmp_path / "auto", hooks=QUIET)
    curve = losses(cpu.out_dir)
    assert len(curve) == 2
    assert losses(auto.out_dir) == curve  # same seed, same device: the same loss at every step
    assert auto.tuned_metrics == cpu.tuned_metrics


@pytest.mark.skipif(NO_GPU, reason="no CUDA device: torch.cuda.is_available() is False on this machine")
def test_cuda_trains_with_mixed_precision(tmp_path, tiny):
    precision = precision_for(torch.device("cuda"), "auto")
    assert precision.dtype in (torch.bfloat16, torch.float16)
    result = train(tiny_config("cuda"), tiny, tmp_path / "cuda", hooks=QUIET)
    curve = losses(result.out_dir)
    assert len(curve) == 2 and all(torch.isfinite(torch.tensor(curve)))
    cpu = losses(train(tiny_config("cpu"), tiny, tmp_path / "cpu", hooks=QUIET).out_dir)
    assert curve[0] == pytest.approx(cpu[0], rel=0.05)  # the first step's loss, before any update


def test_native_bf16_is_read_from_the_cpu_flags(tmp_path):
    amx, avx2 = tmp_path / "amx", tmp_path / "avx2"
    amx.write_text("flags\t\t: fpu sse avx2 avx512f avx512_bf16 amx_bf16 amx_tile\n")
    avx2.write_text("flags\t\t: fpu sse avx2 fma\n")
    assert native_cpu_bf16(amx) == "avx512_bf16"
    assert native_cpu_bf16(avx2) is None
    assert native_cpu_bf16(tmp_path / "absent") is None  # not Linux: unknown counts as emulated
    cpu = torch.device("cpu")
    auto = precision_for(cpu, "auto")
    assert auto.dtype == (torch.bfloat16 if native_cpu_bf16() else None)  # auto follows this CPU's flags
    assert precision_for(cpu, "on").dtype == torch.bfloat16 and precision_for(cpu, "off").dtype is None


def test_forced_cpu_bf16_trains_and_timings_say_what_ran(tmp_path, tiny):
    timer = PhaseTimer()
    config = tiny_config("cpu").model_copy(update={"cpu_bf16": "on"})
    result = train(config, tiny, tmp_path / "bf16", hooks=RunHooks(show_progress=False, timer=timer))
    curve = losses(result.out_dir)
    assert len(curve) == 2 and all(torch.isfinite(torch.tensor(curve)))
    record = timer.to_json()
    assert record["precision"] == "bfloat16"
    native = native_cpu_bf16()
    why = str(record["precision_why"])  # e.g. "cpu_bf16=on: no native bf16 (avx2)": emulated here
    assert why.startswith("cpu_bf16=on: ") and (native or "no native bf16") in why
    off = PhaseTimer()
    train(tiny_config("cpu"), tiny, tmp_path / "off", hooks=RunHooks(show_progress=False, timer=off))
    assert off.to_json()["precision"] == ("bfloat16" if native else "fp32")  # the default is auto
