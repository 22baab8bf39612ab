"""Plumbing shared by the benchmark scripts: the machine a result was measured on, and how it is reported.

Every benchmark prints its figures as one JSON object on its last line and, with `--out`, writes the same
object (indented) to a file.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path

import torch

from ulorl.logging.base import json_text
from ulorl.run.numerics import cpu_model_id


def quiet_torch(threads: int = 1) -> None:
    """`threads` torch threads (one: timings that other jobs on the machine disturb least) and no
    transformers warnings or progress bars."""
    from transformers.utils import logging as hf_logging

    torch.set_num_threads(threads)
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()


_ROUNDING_ENV = ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "MKL_ENABLE_INSTRUCTIONS", "ONEDNN_MAX_CPU_ISA")


def machine(load_before: tuple[float, float, float] | None = None) -> dict:
    """CPU count and model, versions, torch threads, the kernel family torch's CPU ops run (with any environment
    variable that changes the machine's rounding) and the load average before (if given) and now."""
    info = {"cpus": os.cpu_count(), "processor": platform.processor() or platform.machine(),
            "cpu_model": cpu_model_id(), "python": platform.python_version(), "torch": torch.__version__,
            "threads": torch.get_num_threads(), "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "loadavg_after": os.getloadavg()}
    rounding_env = {name: os.environ[name] for name in _ROUNDING_ENV if name in os.environ}
    if rounding_env:
        info["rounding_env"] = rounding_env
    if load_before is not None:
        info["loadavg_before"] = load_before
    return info


def write_result(result: dict, out: str | os.PathLike | None) -> None:
    """Write `result` to `out` as indented strict JSON, NaN and +-inf as null (nothing when `out` is None)."""
    if out:
        Path(out).write_text(json_text(result, indent=1))


def emit(result: dict, out: str | os.PathLike | None = None) -> int:
    """`write_result`, then the one-line JSON on stdout; returns the exit code 0."""
    write_result(result, out)
    print(json_text(result))
    return 0


def decoding_rows(engine, rows: int, ctx: int, max_new: int, params, eos: int):
    """A scheduler of `engine` (a `TorchEngine`) whose `rows` rows are decoding at `ctx` tokens each: their blocks
    taken from the pool directly (nothing prefilled; the K/V is whatever the pool holds), one token sampled, room
    for `max_new` tokens. A step: `sched._sample(sched._decode())`."""
    cache, blocks = engine._pool_for(ctx + max_new)
    sched = engine.scheduler_cls(engine.runner, cache, blocks, engine.stats, [[1] * ctx for _ in range(rows)],
                                 max_new, params, 0, [eos], rows, 1, None, 0, engine.table,
                                 fused_sampler=engine.fused_sampler)
    for s in list(sched.waiting):
        s.blocks = blocks.allocate(blocks.blocks_for(ctx), s.index)
        s.cached, s.tokens, s.logprobs = ctx, [1], [0.0]
    sched.running, sched.waiting = list(sched.waiting), type(sched.waiting)()
    return sched


def kv_bytes_per_token(model) -> int:
    """K and V bytes of one token over all layers, as the torch engine's pool holds them (the model's dtype)."""
    from ulorl.rollout.engines.torch.runner import ModelRunner

    return ModelRunner(model).kv_shape().bytes_per_token
