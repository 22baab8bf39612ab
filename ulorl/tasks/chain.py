"""The built-in verifiable task `chain`: a running sum whose worked solution grows
linearly with a heavy-tailed problem size.

Problem: `chain start s steps n` asks for x_n where x_0 = s and
x_k = (x_{k-1} + c_k) mod 10 with the countdown c_k = n - k + 1; s is in 0..9.

Worked solution (what SFT teaches and RL rewards), one `counter value` pair per step,
the counter counting down from n to 1, then the answer:

    n x_1  n-1 x_2  ...  1 x_n  answer x_n

so a correct response has 2n + 2 tokens plus EOS. Each step needs the previous
pair (decrement the counter, add it to the running value): reasoning length is
proportional to n, and one slip anywhere makes the answer wrong.

Sizes are drawn from a discrete Pareto law, P(n >= k) ~ k^-alpha (alpha = 1.1 by
default), truncated to [1, max_size]: most problems are short, a few are many times
longer, like the 128k-token setting of the paper where most answers end early.

Rows use verl's schema: `data_source`, `prompt` (chat messages), `ability`,
`reward_model.ground_truth`, `extra_info` (index, size, worked `solution`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

DATA_SOURCE = "ulorl/chain"


@dataclass(frozen=True)
class ChainProblem:
    start: int
    steps: int

    def values(self) -> list[int]:
        """x_1 .. x_n of the recurrence."""
        out, x = [], self.start
        for k in range(1, self.steps + 1):
            x = (x + self.steps - k + 1) % 10
            out.append(x)
        return out

    @property
    def answer(self) -> int:
        return self.values()[-1]

    @property
    def prompt_text(self) -> str:
        return f"chain start {self.start} steps {self.steps}"

    def solution_text(self) -> str:
        """The worked solution: `n x_1 n-1 x_2 ... 1 x_n answer x_n`."""
        vals = self.values()
        pairs = [f"{self.steps - k} {v}" for k, v in enumerate(vals)]
        return " ".join(pairs) + f" answer {vals[-1]}"


def sample_size(rng: np.random.Generator, alpha: float, min_size: int, max_size: int) -> int:
    """Discrete Pareto size: floor(min_size * U^(-1/alpha)), truncated to max_size."""
    u = rng.random()
    return int(min(max_size, math.floor(min_size * (1.0 - u) ** (-1.0 / alpha))))


def generate_problems(
    n: int, seed: int, alpha: float = 1.1, min_size: int = 2, max_size: int = 64
) -> list[ChainProblem]:
    """`n` problems, fully determined by `seed` and the size law."""
    if not 1 <= min_size <= max_size:
        raise ValueError(f"need 1 <= min_size <= max_size, got {min_size}, {max_size}")
    rng = np.random.default_rng(seed)
    probs = []
    for _ in range(n):
        size = sample_size(rng, alpha, min_size, max_size)
        probs.append(
            ChainProblem(start=int(rng.integers(10)), steps=size)
        )
    return probs


def verl_row(p, data_source: str, index: int, split: str) -> dict:
    """A built-in problem (`prompt_text`, `answer`, `steps`, `solution_text()`) as a dataset row in verl's schema."""
    return {
        "data_source": data_source,
        "prompt": [{"role": "user", "content": p.prompt_text}],
        "ability": "reasoning",
        "reward_model": {"style": "rule", "ground_truth": str(p.answer)},
        "extra_info": {"split": split, "index": index, "size": p.steps, "solution": p.solution_text()},
    }


def to_row(p: ChainProblem, index: int, split: str) -> dict:
    """A dataset row in verl's schema."""
    return verl_row(p, DATA_SOURCE, index, split)


def make_rows(n: int, seed: int, split: str = "train", **size_law) -> list[dict]:
    """`n` rows of the task; `size_law` forwards alpha/min_size/max_size."""
    return [to_row(p, i, split) for i, p in enumerate(generate_problems(n, seed, **size_law))]


def score_chain(response: str, ground_truth: str) -> float:
    """1.0 when the token after the last `answer` equals the ground truth, else 0.0."""
    toks = response.split()
    for i in range(len(toks) - 2, -1, -1):
        if toks[i] == "answer":
            return float(toks[i + 1] == ground_truth.strip())
    return 0.0
