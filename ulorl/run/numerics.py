"""CPU numerics of a run's processes (`train.cpu_numerics`): the CPU's own fastest kernels, or kernels pinned to
torch's AVX2 family and MKL's reproducible branch (the same floats over MKL's dispatch and thread split; measured,
not the same floats on an Intel and an AMD CPU).

Why two machines give two results from one command: a run on CPU is deterministic on its machine, but the order
in which its sums are rounded follows the kernels that torch and MKL pick for that CPU. torch dispatches its own
kernels (softmax, norms, reductions, the CPU attention kernel) by the widest vector unit it finds (AVX-512 on an
Intel Xeon, AVX2 on an AMD EPYC Zen 3), and MKL picks its GEMM code path by CPU vendor and model, and splits a
GEMM by the thread count. The tiny model's SFT amplifies one rounding difference into another warm start, which
is why the same config lands at different accuracies on machines of this kind (docs/long_run.md).

- `native` (the default): nothing pinned, the fastest kernels of this CPU.
- `portable`: `ATEN_CPU_CAPABILITY=avx2` (torch's AVX2 kernels, also on CPUs with AVX-512) and
  `MKL_CBWR=COMPATIBLE` (MKL's Conditional Numerical Reproducibility on its COMPATIBLE branch: SSE2 without the
  approximate rcpps/rsqrtps, the one branch MKL documents as reproducible on Intel and non-Intel CPUs alike).
  Measured on an Intel Xeon with AMX: the built-in models' forward, backward and AdamW give the same bits with
  1 and 2 threads, and the same bits whatever MKL's own instruction cap (`MKL_ENABLE_INSTRUCTIONS`); a whole run
  still follows the thread count (the demo's SFT gave the same warm start with 1 and 2 threads, its RL not: torch
  splits large reductions between threads), so a config that must reproduce sets `train.threads`; the demo
  took 1.6x its native time (MKL's SSE2 GEMMs: an update 2.4-2.8x, a decode step 1.2x). An AMD EPYC Zen 4 gives
  one hash over threads and MKL's cap as well, but not the Xeon's (benchmarks/numerics_fingerprint.py on both,
  docs/reproduction.md): MKL documents COMPATIBLE as reproducible on Intel and non-Intel CPUs, and what still
  differs between the two has not been found.

On the AMD EPYCs measured (a Zen 4 and a Zen 5) capping MKL and oneDNN at AVX2 changes no bit: torch's kernel
family alone separates an AVX-512 run from an AVX2 one there. A Zen 5 computes a Zen 4's bits in every setting
measured, and torch's AVX2 kernels on it reproduce a Zen 3's whole runs, so the summary's `numerics_line` names
what a result can be compared against: the kernel family, MKL's branch, the thread count and the CPU.

Both settings are environment variables that torch and MKL read once, at their first operation in a process,
so `apply_cpu_numerics` must run before any tensor operation; it checks torch's choice afterwards and raises if
it came too late. Engine and learner child processes start by `spawn` and inherit the environment.
"""

from __future__ import annotations

import os
import platform
import re

from ulorl.config.train import CPU_NUMERICS
from ulorl.errors import ConfigError, UlorlError


class NumericsError(UlorlError):
    """torch picked its CPU kernels before `train.cpu_numerics` could pin them (the CLI prints it as a user error)."""


def apply_cpu_numerics(mode: str) -> None:
    """Make this process (and the children it spawns later) compute with `mode`'s kernels.

    Sets `CPU_NUMERICS[mode]` in the environment (a value already there is kept when it names the same pin, e.g.
    `MKL_CBWR=COMPATIBLE,STRICT`; any other is a `ConfigError` naming the variable), then checks that torch
    dispatches to the pinned kernel family (`NumericsError` if it chose before). On either error the environment
    is left as it was: children spawned later compute as this process does."""
    env = CPU_NUMERICS[mode]
    if not env:
        return
    if platform.machine().lower() not in ("x86_64", "amd64"):
        raise ConfigError(f"train.cpu_numerics={mode} pins x86-64 kernels (AVX2, MKL); this machine is "
                          f"{platform.machine()}: use train.cpu_numerics=native")
    for key, value in env.items():
        have = os.environ.get(key)
        # MKL_CBWR may carry options (COMPATIBLE,STRICT or BRANCH=COMPATIBLE): the branch is what must agree
        if have is not None and value.upper() not in re.split(r"[,=\s]+", have.upper()):
            raise ConfigError(f"train.cpu_numerics={mode} sets {key}={value}, but the environment has {key}={have}: "
                              f"unset it, or use train.cpu_numerics=native to keep it")
    added = [key for key in env if key not in os.environ]
    os.environ.update({key: env[key] for key in added})
    import torch

    capability = torch.backends.cpu.get_cpu_capability()
    if capability != env["ATEN_CPU_CAPABILITY"].upper():
        for key in added:
            del os.environ[key]
        raise NumericsError(
            f"train.cpu_numerics={mode}: torch already dispatches to {capability} kernels in this process (it reads "
            f"ATEN_CPU_CAPABILITY at its first tensor operation, which came before the run); start Python with "
            f"{' '.join(f'{k}={v}' for k, v in env.items())} in the environment, or load the config before any "
            "tensor operation")


def numerics_report(mode: str) -> dict:
    """What a run computed with, for its summary: the mode, torch's kernel family and thread count, MKL's
    reproducibility branch, the CPU (`cpu`: its name; `cpu_model`: with family and model numbers)."""
    import torch

    fields = _cpuinfo()
    return {"mode": mode, "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "mkl_cbwr": os.environ.get("MKL_CBWR", ""), "threads": torch.get_num_threads(), "cpu": cpu_name(fields),
            "cpu_model": cpu_model_id(fields)}


def numerics_line(report: dict) -> str:
    """`numerics_report`'s result as one line of the run's summary: what decided the run's floats, to compare a
    result with runs computed the same way (docs/reproduction.md)."""
    branch = f"MKL_CBWR={report['mkl_cbwr']}" if report.get("mkl_cbwr") else "MKL's automatic branch"
    threads = f"{report['threads']} thread" + ("s" if report["threads"] != 1 else "")
    return (f"floats: train.cpu_numerics={report['mode']}, torch's {report['torch_cpu_capability']} kernels, {branch}, "
            f"{threads}, {report.get('cpu_model') or report['cpu']}")


def _cpuinfo(path: str = "/proc/cpuinfo") -> dict[str, str]:
    """The first processor's fields in /proc/cpuinfo (empty where there is none)."""
    fields: dict[str, str] = {}
    try:
        with open(path) as f:
            for line in f:
                key, _, value = line.partition(":")
                fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    return fields


def cpu_name(fields: dict[str, str] | None = None) -> str:
    """The CPU model as /proc/cpuinfo names it (elsewhere platform.processor(), or "unknown"); `fields`: the file's
    fields if already read (`_cpuinfo`)."""
    fields = _cpuinfo() if fields is None else fields
    return fields.get("model name") or platform.processor() or "unknown"


def cpu_model_id(fields: dict[str, str] | None = None) -> str:
    """`cpu_name()` with /proc/cpuinfo's family and model numbers, which tell apart CPUs that share a name (two AMD
    EPYC generations both name themselves "AMD EPYC"); `fields` as for `cpu_name`."""
    fields = _cpuinfo() if fields is None else fields
    if "cpu family" not in fields:
        return cpu_name(fields)
    return f"{cpu_name(fields)} (family {fields['cpu family']}, model {fields.get('model', '?')})"
