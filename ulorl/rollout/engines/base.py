"""The engine protocol: what segment rollout needs from any generation backend.

An engine continues token prefixes by at most `max_new_tokens` tokens and reports,
per sample, the new tokens, their behaviour log-probs and whether EOS was produced.
Behaviour log-probs are `log_softmax(logits / temperature)` of the sampled token,
*before* top-p/top-k filtering, which is what the learner recomputes (verl does the
same), so SAIS ratios compare like with like.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Protocol, runtime_checkable

import torch

from ulorl.errors import ConfigError


def check_sampling(temperature: float, top_p: float, top_k: int, prefix: str = "") -> None:
    """Validate sampling settings, raising `ConfigError`; `prefix` names their config section (e.g. "rollout.")."""
    if not temperature > 0 or temperature == float("inf"):  # nan and inf too
        raise ConfigError(f"{prefix}temperature must be a finite number > 0, got {temperature}")
    if not 0 < top_p <= 1:
        raise ConfigError(f"{prefix}top_p must be in (0, 1], got {top_p}")
    if top_k == 0 or top_k < -1:
        raise ConfigError(f"{prefix}top_k must be -1 (off) or >= 1, got {top_k}")


@dataclass(frozen=True)
class SamplingParams:
    """Sampling settings (paper defaults: temperature 0.85, top_p 1.0, top_k -1)."""

    temperature: float = 0.85
    top_p: float = 1.0
    top_k: int = -1  # -1: no top-k filtering
    greedy: bool = False

    def __post_init__(self) -> None:
        check_sampling(self.temperature, self.top_p, self.top_k)


@dataclass
class GenerationOutput:
    """Result for one prefix."""

    tokens: list[int]
    logprobs: list[float]
    eos: bool
    prefill_tokens: int = 0
    resumed: bool = False  # continued from K/V the engine kept from its last call (not prefilled again)


@dataclass
class EngineStats:
    """Cumulative counters an engine keeps (read by benchmarks and metrics)."""

    decode_iterations: int = 0
    decode_slots: int = 0  # batch rows x decode iterations
    useful_tokens: int = 0  # sampled tokens that belong to a live sample
    prefill_tokens: int = 0  # real prefix tokens prefilled
    prefill_padded_tokens: int = 0  # tokens the prefill computed, padding included (== prefill_tokens when packed)
    extra: dict = field(default_factory=dict)


def sum_stats(stats: list[EngineStats]) -> EngineStats:
    """Counters of several engines added up; `extra` entries added where numeric."""
    out = EngineStats()
    for s in stats:
        for f in fields(EngineStats):
            if f.name != "extra":
                setattr(out, f.name, getattr(out, f.name) + getattr(s, f.name))
        for k, v in s.extra.items():
            out.extra[k] = out.extra.get(k, 0) + v if isinstance(v, (int, float)) else v
    return out


@runtime_checkable
class Engine(Protocol):
    """A generation backend (the torch engine by default; HF for other architectures; vLLM on GPU).

    An engine that refills a finished row's slot from the waiting prefixes within one call (continuous
    batching) says so with a class attribute `continuous_batching = True` and takes a keyword
    `progress: Callable[[int], None]` in `generate`, called with the number of rows that just finished;
    callers then send many prefixes in one call (`evaluation/groups.py`) instead of chunks that each wait
    for their longest row.
    """

    stats: EngineStats

    def generate(
        self, prefixes: list[list[int]], max_new_tokens: int, params: SamplingParams, seed: int | None = None
    ) -> list[GenerationOutput]:
        """Continue each prefix by at most `max_new_tokens` tokens."""
        ...

    def sync_weights(self, state_dict: dict[str, torch.Tensor]) -> None:
        """Load the learner's current weights."""
        ...


def check_prefixes(prefixes: list[list[int]], max_new_tokens: int) -> None:
    """The argument checks every engine's `generate` makes."""
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    if any(len(p) == 0 for p in prefixes):
        raise ValueError("every prefix needs at least one token")


def close_engine(engine) -> None:
    """Stop what an engine started (`rollout.torch.procs` > 1: its processes); engines without `close` hold none."""
    close = getattr(engine, "close", None)
    if close is not None:
        close()


def load_weights(model: torch.nn.Module, state_dict: dict[str, torch.Tensor]) -> None:
    """Load `state_dict` into `model`, at no cost when it holds the model's own tensors (shared weights)."""
    own = model.state_dict()
    if all(own[k].data_ptr() == v.data_ptr() for k, v in state_dict.items() if k in own):
        return
    model.load_state_dict(state_dict, strict=False)
