"""The trainer's held-out evaluation scores with the run's reward, each row's extra_info included."""

from types import SimpleNamespace

import pytest

from ulorl.config import EvalConfig, LoggingConfig, RewardConfig
from ulorl.data.records import PromptRecord
from ulorl.models import build_tiny_model, load_tokenizer
from ulorl.reward import RewardManager
from ulorl.rollout.engines import GenerationOutput
from ulorl.run.loop import evaluate_policy


class Scripted:
    def __init__(self, script):
        self.script = {k: list(v) for k, v in script.items()}

    def generate(self, prefixes, max_new_tokens, params, seed=None):
        return [self.script[tuple(p)].pop(0) for p in prefixes]


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    return load_tokenizer(build_tiny_model(tmp_path_factory.mktemp("tiny")))


def test_worked_solution_reward_in_the_trainers_evaluation(tok):
    solution = "0 0 3 : 2 , 0 0 2 : 4 , 0 0 1 : 5 , 0 0 0 : 5 , answer 5"
    lucky = "0 0 3 : 2 , 0 0 1 : 3 , 0 0 0 : 3 , answer 5"  # a skipped line, the right final answer

    def out(text):
        ids = tok(text, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        return GenerationOutput(tokens=ids, logprobs=[0.0] * len(ids), eos=True)

    prompt = PromptRecord(7, [1, 2], "add start 2 steps 0 0 3", "5", "ulorl/odometer",
                          extra_info={"solution": solution, "size": 3})
    with RewardManager(RewardConfig(fn="ulorl.tasks.scoring:worked_solution", num_workers=1)) as rm:
        session = SimpleNamespace(
            engine=Scripted({(1, 2): [out(solution), out(lucky)]}), tokenizer=tok, eval_prompts=[prompt],
            reward=rm, history={},
            cfg=SimpleNamespace(eval=EvalConfig(k=2, max_new_tokens=64), logging=LoggingConfig(progress=False)))
        summary = evaluate_policy(session, "before")
    assert summary["avg@k"] == 0.5  # the lucky guess does not count
    assert session.history["eval_correct"]["before"] == [1]
