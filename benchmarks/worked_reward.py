"""A diagnostic reward for the built-in tasks: 1 only when the response is the row's worked solution.

    ulorl train --config configs/long.yaml reward.fn=benchmarks/worked_reward.py:compute_score

The odometer's own reward checks the last value, one of 11, so wrong lines that end on the right value score 1
(`benchmarks/lucky_answers.py` counts them). This one scores such answers 0, to measure what the lucky ones do to
RL (docs/long_run.md). It is not the paper's outcome reward and needs `extra_info.solution` on every row.
"""


def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    return float(solution_str.strip() == (extra_info or {})["solution"].strip())
