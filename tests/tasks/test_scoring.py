"""`ulorl.tasks.scoring.worked_solution`: the whole worked solution must match, not only the final answer."""

from pathlib import Path

import pytest

from ulorl.config import RewardConfig, load_run_config
from ulorl.reward import RewardManager
from ulorl.tasks import task_rows
from ulorl.tasks.odometer import OdometerProblem
from ulorl.tasks.scoring import worked_solution

# add start 2 steps 0 0 3: x = 2, 2 + 2 = 4, 4 + 1 = 5, 5 + 0 = 5 (mod 11)
SOLUTION = "0 0 3 : 2 , 0 0 2 : 4 , 0 0 1 : 5 , 0 0 0 : 5 , answer 5"
INFO = {"solution": SOLUTION, "size": 3}
# line 0 0 2 is skipped; the final value is then a guess, here the right one
LUCKY = "0 0 3 : 2 , 0 0 1 : 3 , 0 0 0 : 3 , answer 5"


def test_the_hand_written_solution_is_the_tasks():
    assert OdometerProblem(start=2, steps=3).solution_text() == SOLUTION


def test_the_worked_solution_scores_one_whatever_the_spacing():
    assert worked_solution("ulorl/odometer", SOLUTION, "5", INFO) == {"score": 1.0, "answer_right": 1.0}
    spaced = "  " + SOLUTION.replace(" , ", " ,\n") + " "
    assert worked_solution("ulorl/odometer", spaced, "5", INFO)["score"] == 1.0


def test_a_skipped_line_with_the_right_answer_scores_zero():
    assert worked_solution("ulorl/odometer", LUCKY, "5", INFO) == {"score": 0.0, "answer_right": 1.0}


def test_a_wrong_answer_and_an_unfinished_response_score_zero():
    assert worked_solution("ulorl/odometer", SOLUTION[:-1] + "6", "5", INFO) == {"score": 0.0, "answer_right": 0.0}
    assert worked_solution("ulorl/odometer", SOLUTION[:20], "5", INFO) == {"score": 0.0, "answer_right": 0.0}


@pytest.mark.parametrize("info", [None, {}, {"solution": ""}])
def test_a_row_without_a_worked_solution_is_an_error_naming_the_source(info):
    with pytest.raises(ValueError, match=r"extra_info\['solution'\].*'my/data'"):
        worked_solution("my/data", SOLUTION, "5", info)


def test_in_the_reward_workers_on_generated_rows():
    rows = task_rows("builtin:odometer", 6, seed=3, split="eval")
    sols = [r["extra_info"]["solution"] for r in rows]
    truths = [r["reward_model"]["ground_truth"] for r in rows]
    lines = sols[0].split(" , ")
    skipped = " , ".join(lines[:1] + lines[2:])  # one line fewer, the same final answer token
    cfg = RewardConfig(fn="ulorl.tasks.scoring:worked_solution", num_workers=1)
    with RewardManager(cfg) as rm:
        got = rm.score_detailed(sols + [skipped], truths + truths[:1], ["ulorl/odometer"] * 7,
                                extra_infos=[r["extra_info"] for r in rows] + [rows[0]["extra_info"]])
    assert got.rewards == [1.0] * 6 + [0.0]
    with RewardManager(RewardConfig(fn="exact", num_workers=1)) as rm:  # the default reward takes the guess
        assert rm.score([skipped], truths[:1], ["ulorl/odometer"]) == [1.0]


def test_the_long_config_rewards_only_the_worked_solution():
    """configs/long.yaml trains with `worked_solution`: its reward refuses the lucky answer the default takes."""
    cfg = load_run_config(Path(__file__).resolve().parents[2] / "configs" / "long.yaml")
    with RewardManager(cfg.reward) as rm:
        got = rm.score_detailed([SOLUTION, LUCKY], ["5", "5"], ["ulorl/odometer"] * 2, extra_infos=[INFO, INFO])
    assert got.rewards == [1.0, 0.0]
