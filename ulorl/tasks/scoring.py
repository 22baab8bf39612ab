"""A stricter reward for the built-in tasks: the whole worked solution, not only the final answer.

    reward.fn: ulorl.tasks.scoring:worked_solution

The built-in tasks' answers are fully determined: a right response *is* the row's worked solution
(`extra_info["solution"]`), token for token. The default reward reads only the token after the last
`answer`, so a response that skipped lines and then guessed scores 1 about one time in eleven on
`odometer` (the running value is one of 11). On long problems such guesses are a large share of the
right answers RL sees (in one 20-step run of `configs/long.yaml`, 26 of the 107 rewarded EOS answers to
problems of >= 1,000 tokens were over 10% shorter or longer than the worked solution), and each one rewards
the skip.
`worked_solution` scores 1 only when the response, whitespace-normalised, equals the worked solution, and
logs the final answer's correctness beside it (`answer_right`). `configs/long.yaml` trains and evaluates with
it: from warm starts that write lines off by one without the error reaching the last value, RL with the
final-answer reward gained nothing, and with this one it gained (docs/long_run.md, "The worked solution as the
reward"). On an earlier version of that config (20 steps, lr 1e-4, no tail) it had kept RL's gain at
2,048-4,096 tokens but lost 19 points at 256-1,023.

Deviation from the paper: UloRL's verifier checks the final answer only. This is a property of the
synthetic task (every step is checkable), not of the method; a real data set keeps `rule`.
"""

from __future__ import annotations

from ulorl.reward.extract import extract_builtin
from ulorl.reward.rule import normalize_answer

__all__ = ["worked_solution"]


def _words(text: str) -> list[str]:
    return text.split()


def worked_solution(data_source: str, solution_str: str, ground_truth: str, extra_info: dict | None = None) -> dict:
    """verl-style score: 1.0 when `solution_str` is the row's worked solution (whitespace-normalised), else 0.0.

    Returns `{"score": ..., "answer_right": ...}`; `answer_right` is the `exact` reward's verdict (the token
    after the last `answer` equals `ground_truth`, both normalised as `exact` does). Raises ValueError when the row has no worked solution."""
    solution = extra_info.get("solution") if isinstance(extra_info, dict) else None
    if not isinstance(solution, str) or not solution:
        raise ValueError(f"worked_solution needs the row's extra_info['solution'] (the built-in tasks' rows have "
                         f"one); the row of data_source {data_source!r} has none")
    answer = extract_builtin(solution_str)
    return {"score": float(_words(solution_str) == _words(solution)),
            "answer_right": float(answer is not None and normalize_answer(answer) == normalize_answer(str(ground_truth)))}
