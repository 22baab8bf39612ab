"""The built-in long-output task `odometer`: a 3-digit counter rolls down to 000
while a running value adds the counter's units digit modulo 11; answers run from
tens to thousands of tokens, with a heavy tail.

Problem: `add start s steps h t u` (n = 100h + 10t + u steps, s in 0..9).
Worked solution: n + 1 lines of six tokens, `h t u : x ,`, then `answer x_n`:

    line 0:  the digits of n and x_0 = s            (copied from the prompt)
    line k:  the digits of c_k = n - k and x_k = (x_{k-1} + (c_k mod 10)) mod 11

so `add start 2 steps 0 0 3` is answered by

    0 0 3 : 2 , 0 0 2 : 4 , 0 0 1 : 5 , 0 0 0 : 5 , answer 5

A correct response has 6n + 8 tokens plus EOS (n = 680: 4,088).

Why this shape (and not `chain` with larger n): `chain`'s step adds a counter that
runs up to n, so a step at counter 40 uses an addition-table entry that short
problems never show, and the counter is a single token whose successor must be
recalled for every value up to n. Here every line restates the whole state
(counter digits and running value), so each token is a function of the previous
line and of tokens earlier in its own line: a fixed look-back of at most six
positions, the same at token 20 as at token 4,000. Every table involved has ten
rows (decrement a digit, borrow on 0, add a digit mod 11), and the units digit
cycles through all ten values even in short problems, so the rules are seen
uniformly at every length; what a long answer adds is only more chances to slip.
The answer still depends on every line: one wrong digit anywhere shifts x_n
(or the line count) and the answer is wrong, unless errors cancel by chance.

Why modulo 11 and six tokens a line (both measured failures of a first version):
- mod 10 made a decade of units digits sum to 45 = 5 (mod 10), so a counter that
  skipped 20, 40, ... lines (a wrong tens digit) still reached the right answer:
  the warm start answered 47% of 30-59-step problems with 35-token responses.
  Mod 11 a decade adds 45 = 1, so a skip leaves the answer unchanged only for
  multiples of 110 lines (or by the 1-in-11 chance of a partial decade).
- The chat template puts three tokens between the prompt's `h t u` and the first
  line, so with six-token lines the copy of line 0 reads the prompt at the same
  distance as every later line reads the line above; with five it was one off,
  and the warm start copied the prompt's tens digit wrong most of the time.
The separators `:` and `,` mark the slots, so the model never has to count
positions to know which one it is writing.

Sizes follow `chain`'s truncated discrete Pareto law (`sample_size`), here on
n in [2, 680] with alpha = 1.0 by default: answer lengths have a median in the
tens, a p90 in the low hundreds and a maximum of 4,089 tokens with EOS (max/mean
above 40; see docs/task.md for the measured figures).

Rows use verl's schema, like `chain`: `data_source = "ulorl/odometer"`, `prompt`
(chat messages), `reward_model.ground_truth`, `extra_info` (split, index, size,
worked `solution`). The reward is the `builtin` extractor's: the token after the
last `answer`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ulorl.tasks.chain import sample_size, verl_row

DATA_SOURCE = "ulorl/odometer"
MAX_STEPS = 999  # three counter digits
TOKENS_PER_LINE = 6  # h t u : x ,
MODULUS = 11  # of the running value


@dataclass(frozen=True)
class OdometerProblem:
    start: int  # x_0, 0..9
    steps: int  # n, 1..999

    def __post_init__(self) -> None:
        if not 0 <= self.start <= 9 or not 1 <= self.steps <= MAX_STEPS:
            raise ValueError(f"need start in 0..9 and steps in 1..{MAX_STEPS}, got {self.start}, {self.steps}")

    def lines(self) -> list[tuple[int, int]]:
        """(counter c_k, running value x_k) for k = 0..n."""
        out, x = [(self.steps, self.start)], self.start
        for c in range(self.steps - 1, -1, -1):
            x = (x + c % 10) % MODULUS
            out.append((c, x))
        return out

    @property
    def answer(self) -> int:
        return self.lines()[-1][1]

    @property
    def prompt_text(self) -> str:
        return f"add start {self.start} steps {_digits(self.steps)}"

    def solution_text(self) -> str:
        """`h t u : x ,` per line, then `answer x_n`."""
        body = " ".join(f"{_digits(c)} : {x} ," for c, x in self.lines())
        return f"{body} answer {self.answer}"

    @property
    def num_tokens(self) -> int:
        """Tokens of the worked solution with the built-in tokenizer, without EOS."""
        return TOKENS_PER_LINE * (self.steps + 1) + 2


def _digits(c: int) -> str:
    return " ".join(f"{c:03d}")


def generate_problems(
    n: int, seed: int, alpha: float = 1.0, min_size: int = 2, max_size: int = 680, uniform: float = 0.0
) -> list[OdometerProblem]:
    """`n` problems, fully determined by `seed` and the size law.

    `uniform`: the share of problems whose size is drawn uniformly from [min_size, max_size] instead of the
    Pareto law (a mixture: long problems without the Pareto law's spike at max_size). 0 draws exactly the
    problems it always drew."""
    if not 1 <= min_size <= max_size <= MAX_STEPS:
        raise ValueError(f"need 1 <= min_size <= max_size <= {MAX_STEPS}, got {min_size}, {max_size}")
    if not 0.0 <= uniform <= 1.0:
        raise ValueError(f"need uniform in [0, 1], got {uniform}")
    rng = np.random.default_rng(seed)
    probs = []
    for _ in range(n):
        if uniform and rng.random() < uniform:
            size = int(rng.integers(min_size, max_size + 1))
        else:
            size = sample_size(rng, alpha, min_size, max_size)
        probs.append(OdometerProblem(start=int(rng.integers(10)), steps=size))
    return probs


def to_row(p: OdometerProblem, index: int, split: str) -> dict:
    """A dataset row in verl's schema."""
    return verl_row(p, DATA_SOURCE, index, split)


def make_rows(n: int, seed: int, split: str = "train", **size_law) -> list[dict]:
    """`n` rows of the task; `size_law` forwards alpha/min_size/max_size/uniform."""
    return [to_row(p, i, split) for i, p in enumerate(generate_problems(n, seed, **size_law))]


@dataclass(frozen=True)
class Diagnosis:
    """What a response to an odometer problem got wrong, against its worked solution.

    kind: `right` (rewarded), `truncated` (no EOS), and for the other wrong answers by their line count against
        the solution's: `short` (under 90%: lines skipped), `over` (over 110%), `slip` (within 10%: a wrong digit
        in a line of about the right count).
    lines, reference_lines: lines of six tokens `h t u : x ,` parsed from the start of each.
    first_wrong: the first line that differs from the solution (None: none of the parsed lines does);
        first_wrong_slot: `counter` if its counter digits differ, else `value`.
    """

    kind: str
    lines: int
    reference_lines: int
    first_wrong: int | None
    first_wrong_slot: str | None


def solution_lines(text: str) -> list[tuple[str, str]]:
    """The leading `h t u : x ,` lines of a response or worked solution as (counter digits, value) strings; parsing
    stops at the first token sequence of another shape (e.g. `answer`)."""
    toks, out = text.split(), []
    for i in range(0, len(toks) - TOKENS_PER_LINE + 1, TOKENS_PER_LINE):
        h, t, u, colon, x, comma = toks[i : i + TOKENS_PER_LINE]
        if colon != ":" or comma != ",":
            break
        out.append((h + t + u, x))
    return out


def diagnose(response: str, solution: str, eos: bool, right: bool) -> Diagnosis:
    """Sort one response (decoded text, special tokens skipped) into a `Diagnosis` against the worked solution."""
    got, ref = solution_lines(response), solution_lines(solution)
    wrong = next((i for i, (a, b) in enumerate(zip(got, ref)) if a != b), None)
    slot = None if wrong is None else ("counter" if got[wrong][0] != ref[wrong][0] else "value")
    if right:
        kind = "right"
    elif not eos:
        kind = "truncated"
    elif len(got) < 0.9 * len(ref):
        kind = "short"
    elif len(got) > 1.1 * len(ref):
        kind = "over"
    else:
        kind = "slip"
    return Diagnosis(kind, len(got), len(ref), wrong, slot)
