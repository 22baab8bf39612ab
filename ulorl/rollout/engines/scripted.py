"""ScriptedEngine: a deterministic engine with scripted response lengths, for tests and planning.

Every new prefix starts a *plan*: a target response length drawn from `lengths`
(cycled in order). The engine emits `target` tokens over as many calls as it takes
(at most `max_new_tokens` per call) and ends with EOS, unless the caller's global
cap cuts it first. Continued prefixes are recognised by their exact tokens, so a
sample continues its own plan across rounds. Behaviour log-probs are
`-0.01 * (version + 1)`, so tests can tell which policy version made a token.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ulorl.rollout.engines.base import EngineStats, GenerationOutput, SamplingParams

FIRST_TOKEN = 5  # ids below are reserved for specials in the built-in tokenizer


class ScriptedEngine:
    def __init__(self, lengths: Sequence[int], eos_id: int, vocab_limit: int = 400) -> None:
        if not lengths or min(lengths) < 1:
            raise ValueError("lengths must be a non-empty list of positive ints")
        self.lengths, self.eos_id, self.vocab_limit = list(lengths), eos_id, vocab_limit
        self.version = 0
        self.stats = EngineStats()
        self._plans: dict[tuple[int, ...], tuple[int, int]] = {}  # prefix -> (plan id, target length)
        self._next_plan = 0
        self._done: dict[int, int] = {}  # plan id -> tokens emitted so far
        self.calls: list[int] = []  # batch size of every call

    def _token(self, plan: int, j: int) -> int:
        span = self.vocab_limit - FIRST_TOKEN
        if j == 0:
            return FIRST_TOKEN + plan % span
        if j == 1:
            return FIRST_TOKEN + (plan // span) % span
        return FIRST_TOKEN + (plan * 7 + j) % span

    def generate(self, prefixes: list[list[int]], max_new_tokens: int, params: SamplingParams,
                 seed: int | None = None) -> list[GenerationOutput]:
        self.calls.append(len(prefixes))
        outs = []
        for p in prefixes:
            key = tuple(p)
            if key in self._plans:
                plan, target = self._plans.pop(key)
                done = self._done[plan]
            else:
                plan, target, done = self._next_plan, self.lengths[self._next_plan % len(self.lengths)], 0
                self._next_plan += 1
            n = min(max_new_tokens, target - done)
            eos = done + n == target
            toks = [self._token(plan, done + j) for j in range(n)]
            if eos:
                toks[-1] = self.eos_id
            else:
                self._plans[key + tuple(toks)] = (plan, target)
            self._done[plan] = done + n
            outs.append(GenerationOutput(tokens=toks, logprobs=[-0.01 * (self.version + 1)] * n, eos=eos,
                                         prefill_tokens=len(p)))
            self.stats.useful_tokens += n
        self.stats.decode_iterations += max((len(o.tokens) for o in outs), default=0)
        return outs

    def sync_weights(self, state_dict: dict[str, torch.Tensor] | None = None) -> None:
        self.version += 1
