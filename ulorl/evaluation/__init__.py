"""Evaluation: avg@k, unbiased pass@k, response lengths and truncation on held-out prompts."""

from ulorl.lazy_exports import lazy_exports

# public name -> the submodule that defines it, imported on first use (see ulorl/lazy_exports.py)
_EXPORTS = {
    "add_eval_arguments": "cli",
    "EvalConfig": "config",
    "EvalResult": "evaluator",
    "evaluate": "evaluator",
    "length_stats": "metrics",
    "paired_difference": "metrics",
    "pass_at_k": "metrics",
    "run_eval": "cli",
    "sample_groups": "groups",
    "ScoreFn": "evaluator",
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)
