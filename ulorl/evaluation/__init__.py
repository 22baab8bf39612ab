"""Evaluation: avg@k, unbiased pass@k, response lengths and truncation on held-out prompts.

The `eval:` config section is `ulorl.config.evaluation`.
"""

from ulorl.evaluation.cli import add_eval_arguments, run_eval
from ulorl.evaluation.evaluator import EvalResult, ScoreFn, evaluate, reward_failure_note
from ulorl.evaluation.groups import sample_groups
from ulorl.evaluation.metrics import length_stats, paired_difference, pass_at_k

__all__ = ["EvalResult", "ScoreFn", "add_eval_arguments", "evaluate", "length_stats", "paired_difference",
           "pass_at_k", "reward_failure_note", "run_eval", "sample_groups"]
