"""The torch engine in several CPU processes: each call's rows split between them, one torch thread each.

On CPU one torch thread per engine is fastest: the decode's per-row operations are too small to split between
threads (docs/long_run.md), so a single engine leaves every other core idle. `rollout.torch.procs = N` runs N
`TorchEngine`s in child processes, each on its own copy of the policy, and splits every `generate` call's rows
between them:

    driver (pools, learner, loop)                child k (TorchEngine on a model copy, one thread)
    generate(prefixes) ── child k's rows ───────> generate(rows, streams=their positions in the call)
    progress bar       <── ("progress", n) ────── n rows finished
    outputs, in order  <── ("ok", (outs, stats)) ─

What stays as with one engine:
- Sampling: a row's random stream is keyed by its position in the driver's call (`streams`), so each row samples
  the tokens one engine would (up to float rounding of logits computed beside other rows).
- Kept K/V (`keep=True`, `kept_rows.py`): a row that continues a kept row goes to the child that kept it; every
  other row goes to the child with the fewest rows, so a group's samples alternate between children. Kept rows
  are counted one by one: the samples of a group are often the same tokens, and n rows with one context that
  children kept n times go back to those children, to each as many as it kept.
- Weights: the children load the driver model's weights, through shared-memory buffers, before the first call
  after any of its parameters changed (their version counters) and on `sync_weights`.

Deviations from one engine: a group whose samples land in two children has its prompt prefilled in each (blocks
are shared within a child). Rows are split by count, not by the decode work they will need (unknown in advance),
so a call waits for the child with the most work. `stats.extra` counts what that costs: `procs_busy_s` sums each
child's seconds from a call's start to its reply, `procs_wait_s` the seconds children that had replied waited for
the last one (a run reports their ratio as `rollout/procs_idle_share`). Each child's KV pool has the whole
`kv_cache_gib` budget (on CPU a pool commits memory only as it fills). CPU only: on a GPU one engine batches all
rows.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from multiprocessing.connection import wait

import torch
import torch.multiprocessing as mp

from ulorl.child_process import child_start, serve
from ulorl.rollout.engines.base import EngineStats, GenerationOutput, SamplingParams, check_prefixes, sum_stats
from ulorl.rollout.engines.torch.kept_rows import weights_version


class EngineProcessError(RuntimeError):
    """An engine process failed or ended; the message holds its traceback."""


class ProcessEngine:
    """The `Engine` protocol over `procs` `TorchEngine`s in child processes (see the module docstring)."""

    continuous_batching = True
    keeps_rows = True

    def __init__(self, model: torch.nn.Module, eos_ids: list[int], procs: int, threads: int = 1,
                 setup: Callable[[object], None] | None = None, **engine_kw) -> None:
        """`engine_kw`: the torch engine's `build_engine` keywords (`max_batch`, `kv_cache_gib`, `dtype`, `torch`).
        `setup`: a picklable function each child calls with its `TorchEngine` once built (benchmarks install a
        length schedule with it)."""
        if procs < 1 or threads < 1:
            raise ValueError(f"procs={procs} and threads={threads} must be >= 1")
        if next(model.parameters()).device.type != "cpu":
            raise ValueError("rollout.torch.procs > 1 splits rows between CPU processes; on a GPU use one engine")
        self.model = model
        self.buffers = {k: v.detach().to("cpu", copy=True).share_memory_() for k, v in model.state_dict().items()}
        self._synced = weights_version(model)
        ctx = mp.get_context("spawn")  # fresh interpreters: no inherited OpenMP state or threads
        self._conns, self._procs = [], []
        for k in range(procs):
            conn, child = ctx.Pipe()
            proc = ctx.Process(target=_serve, name=f"ulorl-engine-{k}", daemon=True,
                               args=(child, copy.deepcopy(model), self.buffers, eos_ids, engine_kw, threads, setup))
            proc.start()
            child.close()
            self._conns.append(conn)
            self._procs.append(proc)
        self._stats = [EngineStats() for _ in range(procs)]
        # prefix a row continues from kept K/V -> the children keeping such a row, one entry per kept row
        self._kept_by: dict[tuple[int, ...], list[int]] = {}
        self._busy_s = self._wait_s = 0.0

    @property
    def procs(self) -> int:
        return len(self._conns)

    @property
    def stats(self) -> EngineStats:
        out = sum_stats(self._stats)
        out.extra.update(procs_busy_s=self._busy_s, procs_wait_s=self._wait_s)
        return out

    def generate(self, prefixes: list[list[int]], max_new_tokens: int, params: SamplingParams,
                 seed: int | None = None, progress: Callable[[int], None] | None = None,
                 keep: bool = False) -> list[GenerationOutput]:
        """As `TorchEngine.generate`; every child gets a call (an empty one releases what it kept)."""
        check_prefixes(prefixes, max_new_tokens)
        self._sync_if_changed()
        if seed is None:
            seed = int(torch.randint(0, 2**62, ()).item())
        parts = self.assign(prefixes)
        t0 = time.perf_counter()
        for conn, rows in zip(self._conns, parts):
            conn.send(("generate", [prefixes[i] for i in rows], max_new_tokens, params, seed, rows, keep,
                       progress is not None))
        outs: list[GenerationOutput | None] = [None] * len(prefixes)
        kept_by: dict[tuple[int, ...], list[int]] = {}
        replies, replied_at = self._gather(progress)
        for k, (rows, (child_outs, stats)) in enumerate(zip(parts, replies)):
            self._stats[k] = stats
            for i, out in zip(rows, child_outs):
                outs[i] = out
                if keep and not out.eos and len(out.tokens) == max_new_tokens:
                    kept_by.setdefault(tuple(prefixes[i] + out.tokens), []).append(k)
        self._kept_by = kept_by
        busy = [t - t0 for t in replied_at]
        self._busy_s += sum(busy)
        self._wait_s += waited_for_last(busy)
        return outs

    def assign(self, prefixes: list[list[int]]) -> list[list[int]]:
        """Row indices per child, ascending: a row continuing a kept row goes where its K/V is (rows with one
        context take the children that kept it in order, one kept row each), every other row to the child with the
        fewest rows so far (the lowest index on ties)."""
        parts: list[list[int]] = [[] for _ in self._conns]
        free = []
        taken: dict[tuple[int, ...], int] = {}
        for i, p in enumerate(prefixes):
            keepers = self._kept_by.get(key := tuple(p), ())
            n = taken.get(key, 0)
            if n < len(keepers):
                taken[key] = n + 1
                parts[keepers[n]].append(i)
            else:
                free.append(i)
        for i in free:
            min(parts, key=len).append(i)
        return [sorted(rows) for rows in parts]

    def sync_weights(self, state_dict: dict[str, torch.Tensor]) -> None:
        with torch.no_grad():
            for k, v in state_dict.items():
                self.buffers[k].copy_(v)
        self._call_all(("sync",))
        self._synced = weights_version(self.model)
        self._kept_by = {}

    def reserve(self, slots: int, capacity: int) -> None:
        """Every child's KV pool set up and budget-checked now (`TorchEngine.reserve`)."""
        self._call_all(("reserve", slots, capacity))

    def release_kept(self) -> None:
        self._call_all(("release",))
        self._kept_by = {}

    def close(self) -> None:
        for conn, proc in zip(self._conns, self._procs):
            if proc.is_alive():
                try:
                    conn.send(("close",))
                except (BrokenPipeError, OSError):
                    pass
        for conn, proc in zip(self._conns, self._procs):
            proc.join(30)
            if proc.is_alive():
                proc.kill()
                proc.join(5)
            conn.close()
        self._conns, self._procs = [], []

    def _sync_if_changed(self) -> None:
        if weights_version(self.model) != self._synced:
            self.sync_weights(self.model.state_dict())

    def _call_all(self, msg: tuple) -> list:
        if not self._conns:
            raise EngineProcessError("the engine processes were closed")
        for conn in self._conns:
            conn.send(msg)
        return self._gather(None)[0]

    def _gather(self, progress: Callable[[int], None] | None) -> tuple[list, list[float]]:
        """Every child's reply to the message just sent and the `perf_counter` time it came, in child order;
        `progress` gets the children's reports. All replies are read before a failure is raised, so the pipes stay
        in step."""
        replies, replied_at, errors = [None] * len(self._conns), [0.0] * len(self._conns), []
        pending = dict(enumerate(self._conns))
        while pending:
            for conn in wait(list(pending.values())):
                k = self._conns.index(conn)
                try:
                    status, *value = conn.recv()
                except (EOFError, OSError):
                    del pending[k]
                    errors.append((None, f"engine process {k} ended (exit code {self._procs[k].exitcode})"))
                    continue
                if status == "progress":
                    if progress is not None:
                        progress(value[0])
                    continue
                del pending[k]
                replied_at[k] = time.perf_counter()
                if status == "error":
                    errors.append((value[0], f"engine process {k} failed:\n{value[1]}"))
                else:
                    replies[k] = value[0]
        if errors:
            exc, message = errors[0]
            if isinstance(exc, Exception):
                raise exc from EngineProcessError(message)
            raise EngineProcessError(message)
        return replies, replied_at


def waited_for_last(busy: list[float]) -> float:
    """Seconds that children which had replied spent waiting for the last one, from each child's seconds to its
    reply in one call: sum over children of (max - own)."""
    return len(busy) * max(busy, default=0.0) - sum(busy)


def _serve(conn, model: torch.nn.Module, buffers: dict[str, torch.Tensor], eos_ids: list[int], engine_kw: dict,
           threads: int, setup: Callable[[object], None] | None) -> None:
    """A child: one torch engine; replies ("ok", value) or ("error", exception or None, traceback) to each message."""
    from ulorl.rollout.engines.registry import build_engine

    child_start(threads)
    engine = build_engine("torch", model, None, eos_ids, **engine_kw)
    if setup is not None:
        setup(engine)

    def handle(msg: tuple):
        op, args = msg[0], msg[1:]
        if op == "generate":
            prefixes, max_new, params, seed, streams, keep, report = args
            progress = (lambda n: conn.send(("progress", n))) if report else None
            return (engine.generate(prefixes, max_new, params, seed=seed, progress=progress, keep=keep,
                                    streams=streams), engine.stats)
        if op == "sync":
            return engine.sync_weights(buffers)
        if op == "reserve":
            return engine.reserve(*args)
        if op == "release":
            return engine.release_kept()
        raise ValueError(f"unknown message {op!r}")

    serve(conn, handle, lambda e, tb: [("error", e, tb), ("error", None, tb)])
