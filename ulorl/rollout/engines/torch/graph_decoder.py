"""Fixed-shape decode steps, captured once per shape as CUDA graphs and replayed (as vLLM and nano-vllm do).

On CUDA a small model's decode step is bound by kernel launches and Python, not by the GPU: every layer
launches a dozen kernels from Python. A CUDA graph records a step's kernels once and replays them with one
launch. A graph fixes every tensor's shape and address, so a step is padded to a bucket:

- rows: `n` live rows are padded to the next batch bucket (1, 2, 4, 8, then multiples of 16 up to the
  engine's `max_batch`); a padding row feeds token 0 at position 0, writes its K/V into the pool's scratch
  block (`kv_cache.py`, never handed out) and attends over that one position;
- block tables: padded to a width bucket (a power of two of blocks), with the scratch block; the backend
  (`table_attention.py`) masks each row at its own context length.

Inputs go into static buffers (one host-to-device copy per tensor per step), the graph of the step's
(rows, width) is replayed, and the logits are read from its static output. A graph is captured the first
time its shape is met: the step is run once eagerly with the real inputs (its K/V writes are the step's own,
so replaying it writes the same values again), then captured; all graphs share one memory pool, a new one
once they are dropped (a wider table, a fallback).

A shape whose first step fails (a compiler or a capture error on this machine) is not fatal: flex or the Triton
kernel falls back to the gather, then CUDA graphs to eager steps, each with a warning (`fallbacks`), and the
step reruns. A failure on a shape that has already run is raised.

Modes: `cuda` (capture and replay), `off` (the same padded step run eagerly: CPU, or CUDA without graphs),
`emulate` (CPU tests: "capture" keeps the step function and its output tensor, "replay" recomputes into that
tensor, so the static-buffer plumbing is tested where no GPU is).
"""

from __future__ import annotations

import warnings
from enum import Enum

import numpy as np
import torch

from ulorl.errors import check_choice
from ulorl.rollout.engines.torch.table_attention import GatherAttention


class GraphMode(str, Enum):
    CUDA = "cuda"
    OFF = "off"
    EMULATE = "emulate"


def batch_buckets(max_batch: int) -> list[int]:
    """The padded batch sizes: 1, 2, 4, 8, 16, then 1.5x and 2x of each power of two (24, 32, 48, 64, 96, ...), up
    to `max_batch` (always included). Each bucket is a compiled kernel and a captured graph (a few seconds each
    on an H200), so they grow geometrically: 13 for 256 rows. A padding row costs its share of the matrix
    products and one position of attention, little next to reading the weights and the live rows' K/V."""
    sizes, p = [1, 2, 4, 8], 16
    while p < max_batch:
        sizes += [p, p * 3 // 2]
        p *= 2
    return sorted({b for b in sizes if b < max_batch} | {max_batch})


def bucket(n: int, sizes: list[int]) -> int:
    """The smallest of `sizes` (ascending) that holds `n`."""
    for b in sizes:
        if b >= n:
            return b
    raise ValueError(f"{n} rows exceed the largest batch bucket {sizes[-1]}")


def width_bucket(blocks: int) -> int:
    """Table width for a row of `blocks` blocks: the next power of two."""
    return 1 << max(blocks - 1, 0).bit_length()


def capture_cuda_graph(step, device: torch.device, pool=None):
    """`step()` run once on a side stream (as torch's CUDA-graph docs ask: kernels compile, workspaces are made),
    then captured into a CUDA graph (in memory pool `pool`, None: a new one) -> (the graph, the captured call's
    output). Capture records only: replay the graph for the output's values."""
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        step()
    torch.cuda.current_stream(device).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, pool=pool):
        out = step()
    return graph, out


def _head_and_tail(text: str, head: int = 300, tail: int = 600) -> str:
    """An error's first and last characters: a compiler's traceback names the failing kernel first and the cause
    (out of shared memory, an unsupported shape) last."""
    return text if len(text) <= head + tail else f"{text[:head]} [...] {text[-tail:]}"


class TableDecoder:
    """Decode steps over block tables, padded to buckets, replayed from CUDA graphs in `cuda` mode."""

    def __init__(self, runner, cache, backend, max_batch: int, mode: str = GraphMode.OFF.value) -> None:
        check_choice("graph mode", mode, GraphMode)
        self.runner, self.cache, self.backend = runner, cache, backend
        self.mode = GraphMode(mode)
        self.buckets = batch_buckets(max_batch)
        self.graphs: dict[tuple[int, int], tuple[object, torch.Tensor]] = {}  # (rows, width) -> (replay, logits)
        self.pool = None  # the graphs' shared memory pool (cuda)
        self.replays = 0  # steps run from a captured graph
        self.fallbacks: list[str] = []  # what failed and what replaced it (`_fall_back`)
        self._shapes_ok: set[tuple[int, int]] = set()  # (rows, width) that have run: a failure there is an error
        self._width = 0  # static buffers' table width (grows; graphs are dropped when it does)
        self._alloc(self.buckets[-1], 1)

    def _alloc(self, rows: int, width: int) -> None:
        dev = self.cache.device
        self.tokens = torch.zeros(rows, dtype=torch.long, device=dev)
        self.pos = torch.zeros(rows, dtype=torch.long, device=dev)
        self.slot = torch.zeros(rows, dtype=torch.long, device=dev)
        self.ctx = torch.ones(rows, dtype=torch.long, device=dev)
        self.table = torch.full((rows, width), self.cache.scratch, dtype=torch.long, device=dev)
        # the host copy of the tables, rewritten only for rows whose block list changed since the last step
        self._host = np.full((rows, width), self.cache.scratch, dtype=np.int64)
        # (the row's block list, its length) as last written: the list is held, so it cannot be a new list at a
        # recycled address; the scheduler only appends to a block list or replaces it
        self._host_rows: list[tuple[list[int] | None, int]] = [(None, 0)] * rows
        self._width = width
        self._drop_graphs()

    def _drop_graphs(self) -> None:
        """Forget every captured graph, and their memory pool with them: once its graphs are gone a pool cannot
        take a new capture (the CUDA allocator asserts `use_count > 0`), so the next capture starts a new one."""
        self.graphs.clear()
        self.pool = None

    def width_for(self, tables: list[list[int]], capacity_blocks: int) -> int:
        """The step's table width: the longest row's blocks, bucketed; for a backend whose cost does not grow
        with the width (`fixed_width`), the call's capacity, so one graph per batch bucket serves the call."""
        return width_bucket(capacity_blocks if self.backend.fixed_width else max(map(len, tables)))

    def decode(self, tokens: list[int], pos: list[int], tables: list[list[int]], capacity_blocks: int
               ) -> torch.Tensor:
        """One step for `n` rows: `tokens[i]` at position `pos[i]` (its K/V written there), attending over blocks
        `tables[i]` (enough for `pos[i] + 1` tokens) -> next-token logits `(n, V)`."""
        n, bs, scratch = len(tokens), self.cache.block_size, self.cache.scratch
        rows = bucket(n, self.buckets)
        width = self.width_for(tables, capacity_blocks)
        if width > self._width:
            self._alloc(self.buckets[-1], width)
        host = self._host
        for i, t in enumerate(tables):
            held, length = self._host_rows[i]
            if held is not t or length != len(t):
                host[i, : len(t)] = t
                host[i, len(t):] = scratch
                self._host_rows[i] = (t, len(t))
        for i in range(n, rows):
            if self._host_rows[i][0] is not None:
                host[i] = scratch
                self._host_rows[i] = (None, 0)
        table = torch.from_numpy(host[:rows, :width])
        p = torch.tensor(pos + [0] * (rows - n), dtype=torch.long)
        last = table[torch.arange(rows), p // bs]  # padding rows: the scratch block
        self.tokens[:rows].copy_(torch.tensor(tokens + [0] * (rows - n), dtype=torch.long))
        self.pos[:rows].copy_(p)
        self.slot[:rows].copy_(last * bs + p % bs)
        self.ctx[:rows].copy_(p + 1)
        self.table[:rows, :width].copy_(table)
        return self._run_or_fall_back(rows, width)[:n]

    def warm_up(self, capacity_blocks: int, progress=None) -> int:
        """Run (compile, capture) every batch bucket's step once, for calls of up to `capacity_blocks` blocks per
        row, so that a timed or long call pays no compilation: as vLLM captures its graphs at start. Every row is
        a padding row (token 0 at position 0, its K/V into the scratch block), so the pool's blocks are untouched.
        `progress(done, total)` after each bucket. Returns the number of buckets run."""
        width = width_bucket(capacity_blocks)  # the widest any step of such a call takes
        if width > self._width:
            self._alloc(self.buckets[-1], width)
        bs, scratch = self.cache.block_size, self.cache.scratch
        for done, rows in enumerate(self.buckets, 1):
            self.tokens[:rows].zero_()
            self.pos[:rows].zero_()
            self.slot[:rows].fill_(scratch * bs)
            self.ctx[:rows].fill_(1)
            self.table[:rows, :width].fill_(scratch)
            if (rows, width) not in self._shapes_ok:
                self._run_or_fall_back(rows, width)
            if progress is not None:
                progress(done, len(self.buckets))
        return len(self.buckets)  # (`decode` copies its rows' tables from the host copy, which this leaves alone)

    def _run_or_fall_back(self, rows: int, width: int) -> torch.Tensor:
        """`_run` from the static buffers; a shape's first step that fails (a compiler or capture error) moves to a
        slower path (`_fall_back`) and reruns, a failure on a shape that has already run is raised."""
        while True:
            try:
                out = self._run(rows, width)
                break
            except Exception as e:  # a slower path, not a dead run
                if (rows, width) in self._shapes_ok or not self._fall_back(e):
                    raise
        self._shapes_ok.add((rows, width))
        return out

    def _fall_back(self, error: Exception) -> bool:
        """After `error` on a shape's first step: flex or the Triton kernel -> gather, then CUDA graphs -> eager;
        False when nothing is left. The step is then rerun from the same static inputs (its K/V writes are the same
        values)."""
        if not isinstance(self.backend, GatherAttention):
            what, self.backend = f"{self.backend.name} -> gather", GatherAttention()
        elif self.mode is GraphMode.CUDA:
            what, self.mode = "CUDA graphs -> eager steps", GraphMode.OFF
        else:
            return False
        msg = f"torch engine decode: {what} after {type(error).__name__}: {_head_and_tail(str(error))}"
        warnings.warn(msg, stacklevel=4)  # at the caller of `decode` (or of `warm_up`)
        self.fallbacks.append(msg)
        self._drop_graphs()
        self._shapes_ok.clear()
        return True

    def _step(self, rows: int, width: int):
        def step() -> torch.Tensor:
            return self.runner.decode_table(self.cache, self.tokens[:rows], self.pos[:rows], self.slot[:rows],
                                            self.table[:rows, :width], self.ctx[:rows], self.backend)
        return step

    def _run(self, rows: int, width: int) -> torch.Tensor:
        step = self._step(rows, width)
        if self.mode is GraphMode.OFF:
            return step()
        key = (rows, width)
        if key not in self.graphs:
            self.graphs[key] = self._capture(step)
            return self.graphs[key][1]  # captured from this step's inputs: already its result
        replay, out = self.graphs[key]
        replay()
        self.replays += 1
        return out

    def _capture(self, step) -> tuple[object, torch.Tensor]:
        if self.mode is GraphMode.EMULATE:
            out = step()
            return (lambda: out.copy_(step())), out
        graph, out = capture_cuda_graph(step, self.cache.device, self.pool)
        if self.pool is None:
            self.pool = graph.pool()
        graph.replay()  # capture records only: run it so `out` holds this step's logits
        return graph.replay, out
