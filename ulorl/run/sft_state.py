"""The SFT's saved state: an interrupted SFT continues where its last save left it, to the same weights.

An SFT folder holds, while the SFT trains:
- `sft_settings.json`: every setting that decides the SFT's weights (`sft_settings`: the model, the `sft:`
  section but its thread count, the checks' sampler when it checks, the pinned CPU kernels). A folder's SFT is
  continued, or its finished model reused, only under the same settings (`settings_changes`);
- `sft_state.pt`: the model's and the optimizer's state, the batch generator's and torch's RNG, and the loop's
  `SFTProgress`, written every `sft.save_every` steps and when a signal stops the SFT, each time by an atomic
  rename (a kill during a save leaves the previous state). The finished SFT deletes it (its model is the result).

Continuing from a state gives the weights, losses and checks of the uninterrupted SFT, bit for bit on the same
machine and kernels (the problems are drawn again from the seed; the rest is in the state). The state does not
record the machine: continued on a CPU with another rounding, the steps after the save are that CPU's.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from ulorl.config import ModelConfig, SFTConfig
from ulorl.config.loader import flatten, yaml_scalar
from ulorl.config.train import CPU_NUMERICS
from ulorl.durable import atomic_write_text, replacing
from ulorl.errors import UlorlError
from ulorl.models.loading import model_written
from ulorl.rollout.engines.base import SamplingParams

SETTINGS_FILE = "sft_settings.json"
STATE_FILE = "sft_state.pt"
# not settings of the weights: the thread count gives the same weights (tests/run/test_sft.py), saves change none
NOT_SETTINGS = ("threads", "save_every")


class SFTStateError(UlorlError):
    """A saved SFT state that does not load."""


@dataclass
class SFTProgress:
    """Where the SFT's loop is after its last step: with the model's, the optimizer's and the RNGs' states, what a
    continued SFT starts from."""

    phase: int = 0  # the phase being trained (0: the short phase when there is one, else the full phase)
    taken: int = 0  # steps taken in that phase
    order: list[int] = field(default_factory=list)  # the buckets left in this epoch (`sft.bucketed`)
    tail_left: bool = False  # a check met `sft.tail_until_p_long`: the full phase trains without the tail
    met: bool = False  # a check met `sft.until_p`: the SFT ends
    losses: list[float] = field(default_factory=list)  # every step's loss so far (its metrics.jsonl rows)
    planned: int = 0  # the steps the progress bar expects (grows while a phase goes on past its plan)
    elapsed_s: float = 0.0  # seconds of training before this process


def sft_settings(model_cfg: ModelConfig, cfg: SFTConfig, check_params: SamplingParams | None) -> dict:
    """The settings that decide an SFT's weights, as `sft_settings.json` records them: `model.path`, its dtype and
    remote code, the `sft:` section (not `sft.threads`), the checks' sampler (None without checks: it decides which
    check meets a bound) and the CPU-kernel pins now in the environment (`train.cpu_numerics`'s variables)."""
    sft = {k: v for k, v in asdict(cfg).items() if k not in NOT_SETTINGS}
    checks = asdict(check_params) if cfg.check_every and check_params is not None else None
    pins = sorted({var for env in CPU_NUMERICS.values() for var in env})
    return {"model": {"path": str(model_cfg.path), "dtype": model_cfg.dtype,
                      "trust_remote_code": model_cfg.trust_remote_code},
            "sft": sft, "checks": checks, "cpu_kernels": {var: os.environ.get(var) for var in pins}}


def settings_changes(folder: Path, settings: dict) -> list[str] | None:
    """How `settings` differ from those recorded in `folder` ('key: recorded -> now' lines; [] the same), or None
    when `folder` records none (or an unreadable record)."""
    try:
        recorded = json.loads((Path(folder) / SETTINGS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    a, b = flatten(recorded), flatten(json.loads(json.dumps(settings)))  # tuples as JSON lists, as recorded
    return [f"{k}: {yaml_scalar(a.get(k))} -> {yaml_scalar(b.get(k))}" for k in sorted(set(a) | set(b))
            if a.get(k) != b.get(k)]


def record_settings(folder: Path, settings: dict) -> None:
    atomic_write_text(Path(folder) / SETTINGS_FILE, json.dumps(settings, indent=1) + "\n")


def has_state(folder: Path) -> bool:
    return (Path(folder) / STATE_FILE).is_file()


def finished(folder: Path) -> bool:
    """Whether the SFT in `folder` is done: its model is written and its state deleted (`run_sft` does both last)."""
    return model_written(Path(folder) / "model") and not has_state(folder)


def save_state(folder: Path, model, opt: torch.optim.Optimizer, gen: torch.Generator, progress: SFTProgress) -> None:
    """Write the SFT's state to `folder/sft_state.pt` by an atomic rename, fsynced first."""
    state = {"model": model.state_dict(), "optimizer": opt.state_dict(), "generator": gen.get_state(),
             "torch_rng": torch.get_rng_state(), "progress": asdict(progress)}
    with replacing(Path(folder) / STATE_FILE) as tmp:
        with open(tmp, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())


def load_state(folder: Path, model, opt: torch.optim.Optimizer, gen: torch.Generator) -> SFTProgress:
    """Restore `folder`'s saved state into `model`, `opt` and `gen` (and torch's RNG); returns its progress. A file
    that does not load (not written by a save: each is an atomic rename) is an `SFTStateError` naming it."""
    path = Path(folder) / STATE_FILE
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
        progress = SFTProgress(**state["progress"])
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        gen.set_state(state["generator"])
        torch.set_rng_state(state["torch_rng"])
    except Exception as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise SFTStateError(f"{path}: not an SFT state this model can continue from ({first}); delete it to start "
                            "the SFT over") from e
    return progress


def drop_state(folder: Path) -> None:
    (Path(folder) / STATE_FILE).unlink(missing_ok=True)


def drop_unfinished_saves(folder: Path) -> None:
    """Delete the temporary files of saves that a kill cut short (`sft_state.pt.tmp-<pid>`, as large as a state)."""
    for leftover in Path(folder).glob(f"{STATE_FILE}.tmp-*"):
        leftover.unlink(missing_ok=True)
