"""Plumbing shared by the benchmark scripts: the machine a result was measured on, and how it is reported.

Every benchmark prints its figures as one JSON object on its last line and, with `--out`, writes the same
object (indented) to a file.
"""

from __future__ import annotations

import json
import os
import platform
from pathlib import Path

import torch


def quiet_torch(threads: int = 1) -> None:
    """`threads` torch threads (one: timings that other jobs on the machine disturb least) and no
    transformers warnings or progress bars."""
    from transformers.utils import logging as hf_logging

    torch.set_num_threads(threads)
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()


def machine(load_before: tuple[float, float, float] | None = None) -> dict:
    """CPU count, versions, torch threads and the load average before (if given) and now."""
    info = {"cpus": os.cpu_count(), "processor": platform.processor() or platform.machine(),
            "python": platform.python_version(), "torch": torch.__version__, "threads": torch.get_num_threads(),
            "loadavg_after": os.getloadavg()}
    if load_before is not None:
        info["loadavg_before"] = load_before
    return info


def write_result(result: dict, out: str | os.PathLike | None) -> None:
    """Write `result` to `out` as indented JSON (nothing when `out` is None)."""
    if out:
        Path(out).write_text(json.dumps(result, indent=1))


def emit(result: dict, out: str | os.PathLike | None = None) -> int:
    """`write_result`, then the one-line JSON on stdout; returns the exit code 0."""
    write_result(result, out)
    print(json.dumps(result))
    return 0
