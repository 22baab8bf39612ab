"""`ulorl plan`: predict segment rollout's time per step for each M from a length distribution and a cost model.

`lengths` (distributions), `simulate` (the real rollout and pools with a fake engine: exact counts per step),
`cost` (seconds per counted unit; least-squares fit), `calibrate` (measure this machine), `planner`
(prediction and recommendation, for a `sync` or `overlap` pipeline), `cli` (the subcommand); `memory`
(learner and KV-cache memory of a model at length L, `ulorl plan --memory`, `memory_cli`).
"""

from ulorl.plan.cost import FEATURES, CostError, CostModel, fit_linear, overlap_bound
from ulorl.plan.lengths import LengthDistribution, LengthSpecError, lengths_from_run, parse_lengths
from ulorl.plan.planner import PlanRow, Workload, fit_to_table, predict, recommend, simulate_all
from ulorl.plan.simulate import SimResult, simulate

__all__ = ["FEATURES", "CostError", "CostModel", "LengthDistribution", "LengthSpecError", "PlanRow",
           "SimResult", "Workload", "fit_linear", "fit_to_table", "lengths_from_run", "overlap_bound", "parse_lengths",
           "predict", "recommend", "simulate", "simulate_all"]
