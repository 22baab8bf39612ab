"""A `LocalLearner` in a child process, so that rollout and the update run at the same time.

`train.pipeline=overlap` (issue 19) lets the engine run the next step's rollout rounds while
the learner computes the current update. On CPU the two must not share threads, and the engine
must not see weights change in the middle of a round, so the learner lives in its own process
(one torch thread) with its own copy of the model:

    driver (engine, pools, rewards, loop)     child (LocalLearner on a model copy)
    submit(batch) ──────── pipe ───────────>  update on W_k -> W_{k+1}
    next step's rounds, engine on W_k         copies W_{k+1} into the shared buffers
    result() <──────────── pipe ──────────── metrics
    model.load_state_dict(buffers): the engine now decodes with W_{k+1}

The weights cross once per update through shared-memory buffers in host memory (no pickling of
tensors per update); the batch and the metrics cross the pipe. On GPUs the child computes on
`device` (`train.learner_device`: a second GPU, or the engine's own for a colocated pipeline):
its weights go device -> host buffers -> the engine's device once per update (2 x the model's
bytes over PCIe; peers use NCCL broadcasts or CUDA IPC for this, not built here), and its
optimizer state comes back to the driver on the CPU for checkpoints. `update()` (the `Learner` protocol) is
`submit` + `result`, so the process learner can also run a plain synchronous loop.

Chosen over the Ray placement by what it costs on the 2-core CI machine: Ray starts a GCS, a
raylet and workers (seconds and hundreds of MB) for what is one child process here; a Ray
learner already exists for multi-machine runs. A child that outlives its driver (SIGKILL) sees
the pipe close and exits; SIGINT/SIGTERM are ignored in the child, the driver's signal handler
decides when to stop (at a step boundary, after `result`).
"""

from __future__ import annotations

import copy
import time
from dataclasses import replace
from typing import TYPE_CHECKING

import torch
import torch.multiprocessing as mp

from ulorl.child_process import child_start, serve

if TYPE_CHECKING:
    from ulorl.config import AlgoConfig, TrainConfig
    from ulorl.trajectory import Trajectory


class LearnerProcessError(RuntimeError):
    """The learner process failed; the message holds its traceback."""


class ProcessLearner:
    """The `Learner` protocol, computed in a child process; `model` receives the weights after each update."""

    def __init__(self, model: torch.nn.Module, train: TrainConfig, algo: AlgoConfig, temperature: float,
                 pad_id: int, threads: int = 1, device: str | None = None) -> None:
        self.model = model
        self.buffers = {k: v.detach().to("cpu", copy=True).share_memory_() for k, v in model.state_dict().items()}
        device = device or train.device
        ctx = mp.get_context("spawn")  # a fresh interpreter: no inherited OpenMP state or threads
        self._conn, child = ctx.Pipe()
        host_copy = copy.deepcopy(model).to("cpu")  # moved to `device` in the child (no CUDA tensors cross)
        self._proc = ctx.Process(target=_serve, name="ulorl-learner", daemon=True,
                                 args=(child, host_copy, self.buffers, replace(train, device=device), algo,
                                       temperature, pad_id, threads))
        self._proc.start()
        child.close()
        self._pending = False
        self._answered = False  # the child has replied to a message

    @property
    def pid(self) -> int | None:
        """The learner process's id (the run summary reads its peak memory)."""
        return self._proc.pid

    def submit(self, trajs: list[Trajectory], version: int, loss_keep: list[bool] | None = None) -> None:
        """Start one update on `trajs` (see `Learner.update`); returns at once. `result()` ends it."""
        if self._pending:
            raise RuntimeError("submit() while an update is in flight: call result() first")
        self._conn.send(("update", trajs, version, loss_keep))
        self._pending = True

    def result(self) -> dict[str, float]:
        """Wait for the update `submit` started; afterwards `model` holds its weights. Its metrics, plus
        `pipeline/learner_idle_s` (the child waited for this batch) and `timing_s/update_compute`."""
        self._pending = False
        metrics = self._call(None)
        with torch.no_grad():
            self.model.load_state_dict(self.buffers)
        return metrics

    def update(self, trajs: list[Trajectory], version: int, loss_keep: list[bool] | None = None) -> dict[str, float]:
        self.submit(trajs, version, loss_keep)
        return self.result()

    def state_dict(self) -> dict:
        return self._call(("state",))

    def load_state_dict(self, state: dict) -> None:
        self._call(("load", state))

    def close(self) -> None:
        if self._proc.is_alive():
            try:
                self._conn.send(("close",))
            except (BrokenPipeError, OSError):
                pass
            self._proc.join(30)
        if self._proc.is_alive():
            self._proc.kill()
            self._proc.join(5)
        self._conn.close()

    def _call(self, msg: tuple | None):
        """Send `msg` (None: only receive the reply of a submitted update) and return the child's answer."""
        if self._pending:
            raise RuntimeError("an update is in flight: call result() first")
        try:
            if msg is not None:
                self._conn.send(msg)
            status, value = self._conn.recv()
        except (EOFError, BrokenPipeError, ConnectionResetError):
            self._proc.join(5)  # its exit code, once it is gone
            starting = "" if self._answered else (
                " before it answered once (its own error is printed above; from a script, a training call "
                "outside `if __name__ == \"__main__\":` does that: the spawned process imports the script again)")
            raise LearnerProcessError(f"the learner process ended unexpectedly (exit code {self._proc.exitcode})"
                                      f"{starting}") from None
        self._answered = True
        if status == "error":
            raise LearnerProcessError(f"the learner process failed:\n{value}")
        return value


def _serve(conn, model, buffers, train, algo, temperature, pad_id, threads) -> None:
    """The child: one `LocalLearner`; answers ("ok", value) or ("error", traceback) to every message."""
    from ulorl.learners.local import LocalLearner

    child_start(threads)
    model.to(train.device)
    learner = LocalLearner(model, train, algo, temperature, pad_id)
    idle_since = time.perf_counter()

    def handle(msg: tuple):
        nonlocal idle_since
        if msg[0] == "update":
            t0 = time.perf_counter()
            m = learner.update(*msg[1:])
            with torch.no_grad():
                for k, v in model.state_dict().items():
                    buffers[k].copy_(v)
            t1 = time.perf_counter()
            value = {**m, "pipeline/learner_idle_s": t0 - idle_since, "timing_s/update_compute": t1 - t0}
            idle_since = t1
            return value
        if msg[0] == "state":
            return _to_cpu(learner.state_dict())  # optimizer.load_state_dict casts back on load
        if msg[0] == "load":
            return learner.load_state_dict(msg[1])
        raise ValueError(f"unknown message {msg[0]!r}")

    serve(conn, handle, lambda e, tb: [("error", tb)])


def _to_cpu(obj):
    """`obj` with every tensor inside (dicts, lists, tuples) copied to the CPU."""
    if isinstance(obj, torch.Tensor):
        return obj.cpu()
    if isinstance(obj, dict):
        return {k: _to_cpu(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to_cpu(v) for v in obj)
    return obj
