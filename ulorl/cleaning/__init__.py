"""Cleaning (`ulorl clean`): rule- and model-based filters over a dataset, before RL.

Above :mod:`ulorl.data`: the steps read rows through the data loaders and
validation, and the model-based steps sample answers through any engine of the
registry (:mod:`ulorl.cleaning.model_sampler`) and score them with the reward
verifier.

- :mod:`~ulorl.cleaning.clean`: `clean_rows` / `run_clean` and the report.
- :mod:`~ulorl.cleaning.steps`: the steps, in a registry keyed by `CleanStep`.
- :mod:`~ulorl.cleaning.rules`: the text heuristics behind the rule-based steps.
- :mod:`~ulorl.cleaning.model_sampler`: k sampled answers per question from one model.
"""

from ulorl.cleaning.clean import CleanReport, add_clean_arguments, clean_rows, run_clean
from ulorl.cleaning.steps import CleanOptions, CleanStep

__all__ = ["CleanOptions", "CleanReport", "CleanStep", "add_clean_arguments", "clean_rows", "run_clean"]
