"""The run state a checkpoint holds beside the weights: every RNG, the state keys a run needs, the save fingerprint."""

from __future__ import annotations

import json
import random

import numpy as np
import torch


def rng_state() -> dict:
    """Python and numpy RNG states as JSON-able data (torch's go to rng.pt)."""
    py = random.getstate()
    name, keys, pos, has_gauss, gauss = np.random.get_state(legacy=True)
    return {"python": [py[0], list(py[1]), py[2]],
            "numpy": [name, keys.tolist(), int(pos), int(has_gauss), float(gauss)]}


def torch_rng_state() -> dict:
    """CPU and (when present) CUDA generator states; tensors only, so `weights_only` loading works."""
    state = {"cpu": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict, torch_state: dict | torch.Tensor | None) -> None:
    py = state["python"]
    random.setstate((py[0], tuple(py[1]), py[2]))
    name, keys, pos, has_gauss, gauss = state["numpy"]
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, gauss))
    if torch_state is None:
        return
    if isinstance(torch_state, torch.Tensor):  # format of early checkpoints: the CPU state only
        torch_state = {"cpu": torch_state}
    torch.set_rng_state(torch_state["cpu"])
    if torch_state.get("cuda") and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(torch_state["cuda"])


def save_fingerprint(step: int, state: dict) -> tuple:
    """What a save at the boundary of `step` holds that can differ from the last save of that step.

    The weights, optimizer and pools only change inside a step, so (step, `state`, every RNG) identifies
    the checkpoint; a save whose fingerprint equals the last one's, while that folder exists, is skipped
    (e.g. the final save after an end-of-run evaluation that drew no random numbers). The history's phase
    times (`phase_s`) are left out: they grow with every save itself."""
    torch_rng = torch_rng_state()
    if "phase_s" in state.get("history", {}):
        state = {**state, "history": {k: v for k, v in state["history"].items() if k != "phase_s"}}
    return (step, json.dumps(state), json.dumps(rng_state()),
            [t.numpy().tobytes() for t in [torch_rng["cpu"], *torch_rng.get("cuda", [])]])


# what state.json must hold for a run to continue (written by TrainSession.save and save_checkpoint)
STATE_KEYS = ("step", "version", "counters", "history", "prompt_source", "rollout", "config", "rng")
POOL_KEYS = ("unfinished", "experience")
