"""`data.too_easy`: the draws (copies agree, the rate is p^k), each distinct problem scored once with the real
model, and a run that drops what a controlled judge calls easy, keeps its decision in the run folder and resumes
from it without judging again."""

import json

import numpy as np
import pytest

from ulorl.cli import main
from ulorl.config import ConfigError, load_run_config
from ulorl.data import load_prompts
from ulorl.evaluation import reference
from ulorl.models import eos_token_ids, load_model, load_tokenizer
from ulorl.rollout.engines.base import SamplingParams
from ulorl.run import too_easy
from ulorl.run.too_easy import decide_too_easy, problem_keys, too_easy_draws


def test_draws_certain_cases_and_copies_agree():
    # p = 1: always dropped; p = 0: never; the copies of "c" (p 0.5) share one draw
    keys = ["a", "b", "c", "a", "c", "b"]
    probs = [1.0, 0.0, 0.5, 1.0, 0.5, 0.0]
    for seed in range(20):
        d = too_easy_draws(probs, keys, k=1, seed=seed)
        assert d[0] and d[3] and not d[1] and not d[5] and d[2] == d[4]
    assert len({tuple(too_easy_draws(probs, keys, 1, s)) for s in range(20)}) == 2  # c goes both ways over seeds
    assert too_easy_draws(probs, keys, 1, 3) == too_easy_draws(probs, keys, 1, 3)  # one stream per seed


def test_draws_drop_at_rate_p_to_the_k():
    # 20,000 distinct problems of p = 0.9, k = 8: dropped with probability 0.9^8 = 0.4305 (SE 0.0035)
    n = 20_000
    dropped = too_easy_draws([0.9] * n, list(range(n)), k=8, seed=1)
    assert abs(np.mean(dropped) - 0.9 ** 8) < 0.015
    assert np.mean(too_easy_draws([0.9] * n, list(range(n)), k=1, seed=1)) == pytest.approx(0.9, abs=0.015)


def test_decide_scores_each_distinct_problem_once(tiny_model_dir, monkeypatch):
    tok = load_tokenizer(tiny_model_dir)
    model = load_model(tiny_model_dir)
    cfg = load_run_config(None, [f"model.path={tiny_model_dir}", "data.train_size=40"])
    rows, _ = load_prompts(cfg.data, tok, "train")
    keys = problem_keys(rows)
    assert len(set(keys)) < len(rows)  # the built-in law repeats short problems
    params, eos = SamplingParams(temperature=1.0), eos_token_ids(model, tok)[0]
    calls = []
    real = reference.score_reference
    monkeypatch.setattr(reference, "score_reference", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    decided = decide_too_easy(model, tok, rows, params, eos, k=2, seed=0)
    assert len(calls) == decided.problems == len(set(keys))
    monkeypatch.setattr(reference, "score_reference", real)
    one_by_one = [s.prob for s in reference.score_references(model, tok, rows, params, eos)]
    assert decided.probs == pytest.approx(one_by_one, rel=1e-6)
    dropped = too_easy_draws(one_by_one, keys, 2, 0)
    assert decided.kept == [i for i, d in enumerate(dropped) if not d]
    assert decided.dropped_problems == len({key for key, d in zip(keys, dropped) if d})


ARGS = ["model.warm_start=none", "train.train_groups=1", "rollout.group_size=2", "rollout.decode_batch=4",
        "rollout.max_response_len=16", "rollout.num_segments=2", "algo.dynamic_sampling=false", "data.train_size=30",
        "data.eval=null", "logging.progress=false", "logging.loggers=[jsonl]", "reward.num_workers=1",
        "checkpoint.every=1", "data.too_easy.method=exact"]


def fake_judge(max_easy_size: int):
    """`score_references` that calls every problem of at most `max_easy_size` steps certain and the rest hopeless."""
    def score(model, tokenizer, records, params, eos_id, progress=False):
        return [reference.ReferenceScore(tokens=1, logprob=0.0 if r.extra_info["size"] <= max_easy_size else -50.0,
                                         prob=1.0 if r.extra_info["size"] <= max_easy_size else 0.0, slips=0.0)
                for r in records]
    return score


def test_a_run_drops_too_easy_problems_and_resumes_from_its_decision(tmp_path, tiny_model_dir, monkeypatch, capsys):
    run = tmp_path / "run"
    args = [f"model.path={tiny_model_dir}", *ARGS]
    monkeypatch.setattr(too_easy, "score_references", fake_judge(2))
    assert main(["train", "-o", str(run), *args, "train.steps=1"]) == 0
    out = capsys.readouterr().out
    rows, _ = load_prompts(load_run_config(None, args).data, load_tokenizer(tiny_model_dir), "train")
    hard = [i for i, r in enumerate(rows) if r.extra_info["size"] > 2]
    assert 0 < len(hard) < len(rows)
    decided = json.loads((run / "too_easy.json").read_text())
    assert decided["kept"] == hard and decided["k"] == 2  # k: rollout.group_size
    summary = json.loads((run / "summary.json").read_text())
    assert summary["too_easy"]["kept_rows"] == len(hard) and summary["too_easy"]["rows"] == len(rows)
    assert f"RL drew from {len(hard)} of {len(rows)} training rows" in out
    drawn = {json.loads(line)["prompt_id"] for line in (run / "samples.jsonl").read_text().splitlines()}
    assert drawn and drawn <= {rows[i].prompt_id for i in hard}

    # resuming never judges again (the policy is now a checkpoint's): it reads the run folder's decision
    def no_judging(*a, **kw):
        raise AssertionError("a resumed run judged the training problems again")
    monkeypatch.setattr(too_easy, "score_references", no_judging)
    saved = (run / "too_easy.json").read_text()
    (run / "too_easy.json").unlink()
    assert main(["train", "-o", str(run), "--resume", "auto", *args, "train.steps=2"]) == 2
    assert "resuming needs" in capsys.readouterr().err
    (run / "too_easy.json").write_text(saved)
    assert main(["train", "-o", str(run), "--resume", "auto", *args, "train.steps=2"]) == 0
    assert "as decided at the start" in capsys.readouterr().out
    drawn = {json.loads(line)["prompt_id"] for line in (run / "samples.jsonl").read_text().splitlines()}
    assert drawn <= {rows[i].prompt_id for i in hard}
    assert json.loads((run / "summary.json").read_text())["steps"] == 2


def test_too_easy_needs_worked_solutions(tmp_path, tiny_model_dir):
    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"{i} + 2", "answer": str(i + 2)}) + "\n" for i in range(3)))
    cfg = load_run_config(None, [f"model.path={tiny_model_dir}", *ARGS, f"data.train={data}"])
    from ulorl.run.session import open_session

    with pytest.raises(ConfigError, match=r"data.too_easy.method=exact: data.train=.*train.jsonl: row 0 .*solution"):
        open_session(cfg, tmp_path / "run")


def test_config_checks():
    with pytest.raises(ConfigError, match="data.too_easy.method='sometimes' is not allowed"):
        load_run_config(None, ["data.too_easy.method=sometimes"])
    with pytest.raises(ConfigError, match="data.too_easy.k must be >= 1"):
        load_run_config(None, ["data.too_easy.k=0"])
