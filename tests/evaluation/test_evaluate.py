"""`evaluate` with a scripted engine (exact counts) and end to end with the tiny model; the CLI."""

from __future__ import annotations

import argparse
import json
from types import SimpleNamespace

import pytest

from ulorl.data import PromptRecord, load_prompts
from ulorl.config import DataConfig
from ulorl.evaluation import add_eval_arguments, evaluate, run_eval
from ulorl.config import EvalConfig, LoggingConfig, RewardConfig
from ulorl.models import build_tiny_model, eos_token_ids, load_model, load_tokenizer
from ulorl.rollout.engines import GenerationOutput
from ulorl.reward import RewardManager
from ulorl.rollout.engines.registry import build_engine
from ulorl.run.loop import evaluate_policy
from ulorl.tasks.chain import score_chain


def chain_score(responses, gts, sources, extra_infos):
    return [score_chain(r, g) for r, g in zip(responses, gts)]


class ScriptedEngine:
    """Returns, for each prefix, its scripted outputs in turn; records the batch sizes it was called with."""

    def __init__(self, script: dict[tuple, list[GenerationOutput]]):
        self.script = {k: list(v) for k, v in script.items()}
        self.batches: list[int] = []

    def generate(self, prefixes, max_new_tokens, params, seed=None):
        self.batches.append(len(prefixes))
        assert (params.temperature, params.top_p, params.top_k) == (0.85, 0.95, 20)
        return [self.script[tuple(p)].pop(0) for p in prefixes]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = build_tiny_model(tmp_path_factory.mktemp("tiny"))
    return path, load_tokenizer(path)


def out(tok, text: str, eos: bool = True) -> GenerationOutput:
    ids = tok(text, add_special_tokens=False)["input_ids"] + ([tok.eos_token_id] if eos else [])
    return GenerationOutput(tokens=ids, logprobs=[0.0] * len(ids), eos=eos)


def test_evaluate_scripted_counts(tiny):
    _, tok = tiny
    p0 = PromptRecord(10, [1, 2], "p0", "3", "a")
    p1 = PromptRecord(11, [1, 3], "p1", "5", "a")
    script = {  # p0: 1 of 4 correct; p1: 2 correct, one correct-looking but truncated (no EOS -> 0)
        (1, 2): [out(tok, "answer 3"), out(tok, "answer 4"), out(tok, "answer 1"), out(tok, "1 2 answer 9")],
        (1, 3): [out(tok, "answer 5"), out(tok, "answer 5"), out(tok, "answer 5", eos=False), out(tok, "x")],
    }
    engine = ScriptedEngine(script)
    cfg = EvalConfig(k=4, pass_k=[1, 2], batch_size=3, max_new_tokens=8)
    res = evaluate(engine, tok, [p0, p1], cfg, chain_score, progress=False)
    assert engine.batches == [3, 3, 2]  # 2 problems x 4 samples, 3 prefixes per call
    assert [(p["prompt_id"], p["correct"], p["truncated"]) for p in res.per_problem] == [(10, 1, 0), (11, 2, 1)]
    s = res.summary
    assert s["avg@k"] == pytest.approx(3 / 8)
    # pass@2: p0 1 - C(3,2)/C(4,2) = 0.5; p1 1 - C(2,2)/C(4,2) = 5/6; mean = 2/3
    assert s["pass@2"] == pytest.approx((0.5 + 5 / 6) / 2)
    assert s["pass@1"] == pytest.approx(3 / 8) and s["pass@4"] == 1.0
    assert s["truncation_rate"] == pytest.approx(1 / 8)
    # lengths in tokens, EOS included: p0 = 3 + 3 + 3 + 5 ("1 2 answer 9"+EOS); p1 = 3 + 3 + 2 (no EOS) + 2 ("x"+EOS)
    # mean = (14 + 10) / 8 = 3
    assert s["response_length/max"] == 5 and s["response_length/mean"] == pytest.approx(3.0)
    d = json.loads(res.to_json())
    assert d["summary"] == s and d["config"]["k"] == 4
    md = res.to_markdown()
    assert "| avg@k | 0.3750 |" in md and "| 11 | a | 2/4 |" in md


def test_the_score_function_gets_each_rows_extra_info(tiny):
    """A reward that reads the row (the built-in tasks' `worked_solution`) is scored in evaluation as in training."""
    _, tok = tiny
    p0 = PromptRecord(0, [1, 2], "p0", "3", "a", extra_info={"solution": "answer 3"})
    p1 = PromptRecord(1, [1, 3], "p1", "5", "a", extra_info={"solution": "2 answer 5"})
    script = {(1, 2): [out(tok, "answer 3"), out(tok, "answer 3", eos=False)],
              (1, 3): [out(tok, "2 answer 5"), out(tok, "answer 5")]}
    seen = []

    def whole_solution(responses, gts, sources, extra_infos):
        seen.extend(info["solution"] for info in extra_infos)
        return [float(r == info["solution"]) for r, info in zip(responses, extra_infos)]

    res = evaluate(ScriptedEngine(script), tok, [p0, p1], EvalConfig(k=2, max_new_tokens=8), whole_solution,
                   progress=False)
    assert seen == ["answer 3", "2 answer 5", "2 answer 5"]  # the truncated sample is not scored
    assert [p["correct"] for p in res.per_problem] == [1, 1]  # "answer 5" has the answer, not the solution


def test_the_trainers_evaluation_scores_with_the_runs_reward(tiny):
    """`evaluate_policy` hands the row's extra_info to the run's reward: `worked_solution` refuses a lucky guess."""
    _, tok = tiny
    solution = "0 0 3 : 2 , 0 0 2 : 4 , 0 0 1 : 5 , 0 0 0 : 5 , answer 5"
    lucky = "0 0 3 : 2 , 0 0 1 : 3 , 0 0 0 : 3 , answer 5"  # a skipped line, the right final answer
    prompt = PromptRecord(7, [1, 2], "add start 2 steps 0 0 3", "5", "ulorl/odometer",
                          extra_info={"solution": solution, "size": 3})
    with RewardManager(RewardConfig(fn="ulorl.tasks.scoring:worked_solution", num_workers=1)) as rm:
        session = SimpleNamespace(
            engine=ScriptedEngine({(1, 2): [out(tok, solution), out(tok, lucky)]}), tokenizer=tok,
            eval_prompts=[prompt], reward=rm, history={},
            cfg=SimpleNamespace(eval=EvalConfig(k=2, max_new_tokens=64), logging=LoggingConfig(progress=False)))
        summary = evaluate_policy(session, "before")
    assert summary["avg@k"] == 0.5  # the lucky guess does not count
    assert session.history["eval_correct"]["before"] == [1]


def test_evaluate_end_to_end_tiny_model(tiny):
    path, tok = tiny
    model = load_model(path)
    engine = build_engine("hf", model, tok, eos_token_ids(model, tok))
    prompts, _ = load_prompts(DataConfig(eval_size=3), tok, "eval")
    cfg = EvalConfig(k=2, max_new_tokens=6, num_problems=2, batch_size=4)
    res = evaluate(engine, tok, prompts, cfg, chain_score, progress=False)
    s = res.summary
    assert s["num_problems"] == 2 and len(res.per_problem) == 2
    assert 0 <= s["avg@k"] <= s["pass@2"] <= 1 and set(s) >= {"pass@1", "pass@2", "truncation_rate"}
    assert 1 <= s["response_length/mean"] <= s["response_length/max"] <= 6


def test_finished_responses_without_a_computed_reward_are_counted_and_named(tiny):
    """A score function that says which responses have no reward (`RewardManager.score_detailed`): they count as
    not correct, `reward_failed` counts them (finished responses only: a truncated one is never scored), and the
    note names the first reason."""
    from ulorl.evaluation import reward_failure_note
    from ulorl.reward.manager import RewardScores

    _, tok = tiny
    p0 = PromptRecord(10, [1, 2], "p0", "3", "a")
    script = {(1, 2): [out(tok, "answer 3"), out(tok, "answer 3"), out(tok, "answer 3", eos=False), out(tok, "x")]}
    seen = []

    def score(responses, gts, sources, extra_infos):
        seen.append(len(responses))
        return RewardScores([1.0, 0.0, 0.0], [None, "f: error: KeyError: 'x'", "timeout: f ran past 1 s"])

    res = evaluate(ScriptedEngine(script), tok, [p0], EvalConfig(k=4, pass_k=[1], max_new_tokens=8), score,
                   progress=False)
    assert seen == [3] and res.summary["avg@k"] == 0.25 and res.summary["reward_failed"] == 2
    assert reward_failure_note(res) == ("warning: eval: 2 of the 3 finished responses have no reward, counted as "
                                        "not correct (their reward function failed or timed out); the first: f: "
                                        "error: KeyError: 'x'")
    plain = evaluate(ScriptedEngine(script), tok, [p0], EvalConfig(k=4, pass_k=[1], max_new_tokens=8),
                     lambda r, g, s, extra_infos: [1.0, 0.0, 0.0], progress=False)  # a list of floats: none failed
    assert plain.summary["reward_failed"] == 0 and reward_failure_note(plain) is None


def test_run_eval_cli_says_when_a_reward_function_fails(tiny, tmp_path, capsys, monkeypatch):
    import ulorl.evaluation.evaluator as evaluator

    path, _ = tiny
    fn = tmp_path / "rewards.py"
    fn.write_text("def broken(data_source, solution_str, ground_truth, extra_info=None):\n"
                  "    raise KeyError('x')\n")
    data = tmp_path / "set.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"chain start {i} add 1 steps 1", "answer": str(i + 1)}) + "\n"
                            for i in range(3)))
    real = evaluator.sample_groups

    def finished(*a, **k):  # every response ends with EOS, so each is scored
        return [[GenerationOutput(tokens=o.tokens[:1] + [0], logprobs=[0.0, 0.0], eos=True) for o in g]
                for g in real(*a, **k)]

    monkeypatch.setattr(evaluator, "sample_groups", finished)
    argv = ["--model", str(path), "--data", str(data), "--k", "2", "--max-new-tokens", "1", "--output",
            str(tmp_path / "out"), "--reward", f"fn={fn}:broken", "num_workers=1"]
    assert run_eval(add_eval_arguments(argparse.ArgumentParser()).parse_args(argv)) == 0
    assert "warning: set.jsonl: 6 of the 6 finished responses have no reward, counted as not correct (their reward " \
           "function failed or timed out); the first: broken: error: KeyError: 'x'" in capsys.readouterr().out
    summary = json.loads((tmp_path / "out" / "results.json").read_text())["datasets"]["set.jsonl"]["summary"]
    assert summary["reward_failed"] == 6 and summary["avg@k"] == 0.0


def test_run_eval_cli_writes_results_and_report(tiny, tmp_path):
    path, _ = tiny
    data = tmp_path / "set.jsonl"
    data.write_text(json.dumps({"prompt": "chain start 1 mul 1 add 1 steps 1", "answer": "2"}) + "\n")
    argv = ["--model", str(path), "--data", "builtin:chain", str(data), "--k", "2", "--num-problems", "2",
            "--max-new-tokens", "4", "--output", str(tmp_path / "out")]
    assert run_eval(add_eval_arguments(argparse.ArgumentParser()).parse_args(argv)) == 0
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert set(results["datasets"]) == {"builtin:chain", "set.jsonl"}
    assert results["datasets"]["builtin:chain"]["summary"]["num_problems"] == 2
    assert results["datasets"]["set.jsonl"]["summary"]["num_problems"] == 1
    report = (tmp_path / "out" / "report.md").read_text()
    assert "## builtin:chain" in report and "## set.jsonl" in report


def test_a_continuous_batching_engine_gets_calls_as_large_as_the_token_cap(monkeypatch):
    """The torch engine refills slots within a call: evaluation sends it every prefix it can hold (calls cut at
    MAX_CALL_TOKENS token cells), seeds call by call, and the progress bar advances with each finished row."""
    from ulorl.evaluation import groups
    from ulorl.rollout.engines import SamplingParams

    class Continuous:
        continuous_batching = True

        def __init__(self):
            self.calls = []

        def generate(self, prefixes, max_new_tokens, params, seed=None, progress=None):
            self.calls.append((len(prefixes), seed))
            for _ in prefixes:
                progress(1)
            return [GenerationOutput(tokens=[p[0]], logprobs=[0.0], eos=True) for p in prefixes]

    monkeypatch.setattr(groups, "MAX_CALL_TOKENS", 40)
    eng = Continuous()
    prefixes = [[i + 1] for i in range(7)]
    got = groups.sample_groups(eng, prefixes, 3, SamplingParams(), max_new_tokens=4, batch_size=2, seed=5,
                               progress=False)
    assert eng.calls == [(10, 5), (10, 6), (1, 7)]  # 21 prefixes, 40 // 4 = 10 per call (not batch_size=2)
    assert [[o.tokens[0] for o in g] for g in got] == [[i + 1] * 3 for i in range(7)]  # regrouped in order
