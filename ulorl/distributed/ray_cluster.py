"""Connecting to Ray: the optional import with an install hint, and `ray.init` for a run.

`distributed.ray_address: null` starts a local cluster sized to the actors the run
asks for (logical CPUs: two engine actors and a learner fit on a 2-core laptop);
any other value joins an existing cluster (`"auto"` on a node of a cluster started
with `ray start --head`, or `"ray://head:10001"` through Ray Client). A Ray session
that is already initialised (the user's own `ray.init`, a test fixture) is reused.
"""

from __future__ import annotations

import copy
import math
import signal
import threading

import torch

from ulorl.config.distributed import DistributedConfig


def require_ray():
    """The `ray` module, or an ImportError that says how to install it."""
    try:
        import ray
    except ImportError as e:
        raise ImportError("distributed.backend=ray needs Ray: pip install 'ulorl[ray]' (or 'ray>=2.10')") from e
    return ray


def connect(cfg: DistributedConfig):
    """Initialise Ray for a run (once per process) and return the module."""
    ray = require_ray()
    if ray.is_initialized():
        return ray
    # ray.init replaces the process's SIGTERM handler; the trainer's own (checkpoint at the step
    # boundary, then exit) and the caller's handlers are put back
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        if cfg.ray_address is not None:
            ray.init(address=cfg.ray_address)
        else:
            wanted = cfg.num_engines * cfg.cpus_per_engine + cfg.learner_procs * cfg.cpus_per_learner
            ray.init(num_cpus=cfg.num_cpus or max(1, math.ceil(wanted)), include_dashboard=False)
    finally:
        if threading.current_thread() is threading.main_thread():
            for sig, h in handlers.items():
                signal.signal(sig, h)
    return ray


def actor_threads(num_cpus: float) -> None:
    """Inside an actor: as many torch threads as CPUs reserved for it (at least one)."""
    torch.set_num_threads(max(1, int(num_cpus)))


def cpu_model(model: torch.nn.Module) -> torch.nn.Module:
    """The model itself when on CPU, else a CPU copy: what goes into the object store for actors to load."""
    return model if next(model.parameters()).device.type == "cpu" else copy.deepcopy(model).cpu()
