"""Benchmark scripts imported by the engine tests: `benchmarks/` is a folder of scripts, not a package."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

BENCHMARKS = str(Path(__file__).resolve().parents[3] / "benchmarks")


def benchmark_module(name: str) -> ModuleType:
    """`benchmarks/<name>.py` as a module (its own imports of sibling scripts resolved while it loads)."""
    sys.path.insert(0, BENCHMARKS)
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(BENCHMARKS)
