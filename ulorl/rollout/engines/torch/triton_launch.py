"""One Triton kernel launch, held until it runs: what a graph capture replays and `triton_aot` compiles ahead of time.

The decode attention's kernels (`triton_decode`) and the sampler's (`triton_sampler`) both return their launches
as `Launch` records, so the engine captures, times and compiles them the same way. Importing this module does not
import Triton: a record only holds a `triton.jit` function.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Launch:
    """One kernel launch: `kernel[grid](*args, **kwargs)` (kwargs: the constexprs and the launch options)."""

    kernel: object  # a `triton.jit` function
    grid: tuple[int, ...]
    args: tuple
    kwargs: dict

    def run(self) -> None:
        self.kernel[self.grid](*self.args, **self.kwargs)
