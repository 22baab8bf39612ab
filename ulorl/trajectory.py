"""Trajectory and Segment records: one sampled response and how it was made.

A response is a concatenation of segments; each segment remembers the policy
version that generated it and its token span, and every response token keeps its
behaviour log-prob (at the sampling temperature). Scoring sets `reward` and, once,
`loss_keep` (the overlong policy's decision; the learner reads it). Records serialise
to plain JSON (no pickle), so pools can be checkpointed and audited; a record saved
before `loss_keep` or `reward_failure` existed loads with `loss_keep=True` and no failure.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import Enum


class StopReason(str, Enum):
    EOS = "eos"  # finished -> experience pool
    SEGMENT_CAP = "segment_cap"  # segment length reached, global not -> unfinished pool
    TRUNCATED = "truncated"  # global max length reached -> experience pool (reward 0 by default)


@dataclass
class Segment:
    version: int  # policy version (number of updates applied) that generated this segment
    start: int  # first response-token index of the segment
    end: int  # one past the last


@dataclass
class Trajectory:
    sample_id: str  # unique: "<group_id>/<k>"
    group_id: str  # unique per prompt draw: "g<counter>"
    prompt_id: int  # row of the dataset
    prompt_tokens: list[int]
    ground_truth: str
    data_source: str
    response_tokens: list[int] = field(default_factory=list)
    behaviour_logprobs: list[float] = field(default_factory=list)
    segments: list[Segment] = field(default_factory=list)
    stop_reason: str | None = None
    reward: float | None = None
    born_step: int = 0  # training step at which its prompt entered the rollout
    extra_info: dict = field(default_factory=dict)  # the dataset row's extra_info, for reward functions and the judge
    loss_keep: bool = True  # False: the overlong policy drops it from the loss (decided once, when it is scored)
    reward_failure: str | None = None  # why no reward was computed (the function raised or timed out): never trained

    @property
    def response_len(self) -> int:
        return len(self.response_tokens)

    @property
    def finished(self) -> bool:
        return self.stop_reason in (StopReason.EOS.value, StopReason.TRUNCATED.value)

    @property
    def truncated(self) -> bool:
        return self.stop_reason == StopReason.TRUNCATED.value

    def versions(self) -> list[int]:
        return [s.version for s in self.segments]

    def token_versions(self) -> list[int]:
        """Policy version of every response token (the f(t) of SAIS)."""
        out: list[int] = []
        for s in self.segments:
            out += [s.version] * (s.end - s.start)
        return out

    def append_segment(self, tokens: list[int], logprobs: list[float], version: int) -> None:
        if len(tokens) != len(logprobs):
            raise ValueError(f"{self.sample_id}: {len(tokens)} tokens but {len(logprobs)} log-probs")
        start = len(self.response_tokens)
        self.response_tokens += tokens
        self.behaviour_logprobs += logprobs
        self.segments.append(Segment(version=version, start=start, end=start + len(tokens)))

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Trajectory":
        d = dict(d)
        d["segments"] = [Segment(**s) for s in d.get("segments", [])]
        return cls(**d)
