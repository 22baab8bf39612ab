"""One request of a `generate` call: its prefix, what it has produced, and where its K/V lives."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Sequence:
    """A row's whole state (nano-vllm's `Sequence`).

    `prefix` is what the caller sent; `tokens`/`logprobs` are what this call sampled. The K/V of the first
    `cached` tokens of `prefix + tokens` are in `blocks` (0 while waiting); the first `shared` of those blocks
    are full prompt blocks shared with the other samples of its group. A preempted sequence goes back to the
    queue with its tokens and log-probs and, when admitted again, is prefilled with `prefix + tokens`.
    """

    index: int  # position in the call's prefixes (the output order)
    prefix: list[int]
    max_new: int
    stream: int  # the key of its random stream (`sampler.row_uniforms`): `index`, or the id the caller gave the row
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    eos: bool = False
    blocks: list[int] = field(default_factory=list)
    shared: int = 0
    run: int = 0  # its first `run` blocks are consecutive, taken from the top of the pool (read as one view; 0: none)
    cached: int = 0
    preemptions: int = 0

    @property
    def context(self) -> list[int]:
        """The tokens a prefill of this sequence processes."""
        return self.prefix + self.tokens

    @property
    def last_token(self) -> int:
        """The token the next decode step feeds (the last sampled one; a row resumed from kept K/V: its prefix's
        last)."""
        return self.tokens[-1] if self.tokens else self.prefix[-1]

    @property
    def length(self) -> int:
        return len(self.prefix) + len(self.tokens)

    @property
    def done(self) -> bool:
        return self.eos or len(self.tokens) >= self.max_new
