"""Evaluation: avg@k, unbiased pass@k, response lengths and truncation on held-out prompts."""

from ulorl.evaluation.cli import add_eval_arguments, run_eval
from ulorl.evaluation.config import EvalConfig
from ulorl.evaluation.evaluate import EvalResult, ScoreFn, evaluate
from ulorl.evaluation.metrics import length_stats, paired_difference, pass_at_k
from ulorl.evaluation.groups import sample_groups

__all__ = ["EvalConfig", "EvalResult", "ScoreFn", "add_eval_arguments", "evaluate", "length_stats", "paired_difference",
           "pass_at_k",
           "run_eval", "sample_groups"]
