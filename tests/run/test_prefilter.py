"""`data.prefilter`: the draws (copies agree, the rates are p^k and (1 - p)^hard_k), each distinct problem scored
once with the real model, and a run that drops what a controlled judge calls easy, keeps its decision in the run
folder and resumes from it without judging again."""

import json

import pytest

from ulorl.cli import main
from ulorl.config import ConfigError, load_run_config
from ulorl.data import load_prompts
from ulorl.evaluation import reference
from ulorl.models import eos_token_ids, load_model, load_tokenizer
from ulorl.rollout.engines.base import SamplingParams
from ulorl.run import prefilter
from ulorl.run.prefilter import EASY, HARD, KEPT, decide_prefilter, prefilter_draws, problem_keys


def test_draws_certain_cases_and_copies_agree():
    # p = 1: always too easy; p = 0: never (and always too hard when that is on); the copies of "c" share one draw
    keys = ["a", "b", "c", "a", "c", "b"]
    probs = [1.0, 0.0, 0.5, 1.0, 0.5, 0.0]
    for seed in range(20):
        d = prefilter_draws(probs, keys, k=1, seed=seed)
        assert d[0] == d[3] == EASY and d[1] == d[5] == KEPT and d[2] == d[4] in (EASY, KEPT)
        both = prefilter_draws(probs, keys, k=1, seed=seed, too_hard=True)
        assert both[1] == both[5] == HARD and both[0] == EASY
        assert both[2] == (EASY if d[2] == EASY else HARD)  # too-easy fates unchanged; at k = 1, p = 0.5 all go
        hard_only = prefilter_draws(probs, keys, k=1, seed=seed, too_easy=False, too_hard=True)
        assert hard_only[0] == KEPT and hard_only[1] == HARD
    assert len({tuple(prefilter_draws(probs, keys, 1, s)) for s in range(20)}) == 2  # c goes both ways over seeds
    assert prefilter_draws(probs, keys, 1, 3) == prefilter_draws(probs, keys, 1, 3)  # one stream per seed


def test_draws_drop_at_rates_p_to_the_k_and_one_minus_p_to_the_k():
    # 20,000 distinct problems of p = 0.9, k = 8: too easy with probability 0.9^8 = 0.4305 (SE 0.0035); at p = 0.1
    # too hard with probability 0.9^8 as well; at p = 0.5, k = 2: 0.25 each way
    n = 20_000
    fates = prefilter_draws([0.9] * n, list(range(n)), k=8, seed=1, too_hard=True)
    assert abs(fates.count(EASY) / n - 0.9 ** 8) < 0.015 and fates.count(HARD) / n < 1e-3  # 0.1^8 ~ 0
    fates = prefilter_draws([0.1] * n, list(range(n)), k=8, seed=1, too_hard=True)
    assert abs(fates.count(HARD) / n - 0.9 ** 8) < 0.015 and fates.count(EASY) == 0
    fates = prefilter_draws([0.5] * n, list(range(n)), k=2, seed=2, too_hard=True)
    assert abs(fates.count(EASY) / n - 0.25) < 0.015 and abs(fates.count(HARD) / n - 0.25) < 0.015
    # hard_k apart from k: at p = 0.1, k = 8, hard_k = 32 too hard with probability 0.9^32 = 0.0343; too easy as before
    fates = prefilter_draws([0.1] * n, list(range(n)), k=8, seed=1, too_hard=True, hard_k=32)
    assert abs(fates.count(HARD) / n - 0.9 ** 32) < 0.006 and fates.count(EASY) == 0
    fates = prefilter_draws([0.9] * n, list(range(n)), k=8, seed=1, too_hard=True, hard_k=2)
    assert abs(fates.count(EASY) / n - 0.9 ** 8) < 0.015 and abs(fates.count(HARD) / n - 0.01) < 0.004


def test_decide_scores_each_distinct_problem_once(tiny_model_dir, monkeypatch):
    tok = load_tokenizer(tiny_model_dir)
    model = load_model(tiny_model_dir)
    cfg = load_run_config(None, [f"model.path={tiny_model_dir}", "data.train_size=40"])
    rows, _ = load_prompts(cfg.data, tok, "train")
    keys = problem_keys(rows)
    assert len(set(keys)) < len(rows)  # the built-in law repeats short problems
    params, eos = SamplingParams(temperature=1.0), eos_token_ids(model, tok)[0]
    scored = []  # the pairs each call scores
    real = reference.score_pairs
    monkeypatch.setattr(reference, "score_pairs", lambda model, pairs, *a, **kw: scored.append(len(pairs)) or
                        real(model, pairs, *a, **kw))
    decided = decide_prefilter(model, tok, rows, params, eos, k=2, seed=0, too_hard=True)
    assert scored == [decided.problems] and decided.problems == len(set(keys))
    monkeypatch.setattr(reference, "score_pairs", real)
    one_by_one = [s.prob for s in reference.score_references(model, tok, rows, params, eos)]
    assert decided.probs == pytest.approx(one_by_one, rel=1e-6)
    fates = prefilter_draws(one_by_one, keys, 2, 0, too_hard=True)
    assert decided.kept == [i for i, f in enumerate(fates) if f == KEPT]
    # kept and probs index the loaded (shuffled) rows; prompt_ids maps each index to the id samples.jsonl names
    assert decided.prompt_ids == [r.prompt_id for r in rows] != sorted(decided.prompt_ids)
    assert decided.dropped_easy == len({key for key, f in zip(keys, fates) if f == EASY})
    assert decided.dropped_hard == len({key for key, f in zip(keys, fates) if f == HARD}) > 0  # untrained: p ~ 0


ARGS = ["model.warm_start=none", "train.train_groups=1", "rollout.group_size=2", "rollout.decode_batch=4",
        "rollout.max_response_len=16", "rollout.num_segments=2", "algo.dynamic_sampling=false", "data.train_size=30",
        "data.eval=null", "logging.progress=false", "logging.loggers=[jsonl]", "reward.num_workers=1",
        "checkpoint.every=1", "data.prefilter.method=exact"]


def fake_judge(max_easy_size: int):
    """`score_references` that calls every problem of at most `max_easy_size` steps certain and the rest hopeless."""
    def score(model, tokenizer, records, params, eos_id, progress=False, desc=""):
        return [reference.ReferenceScore(tokens=1, logprob=0.0 if r.extra_info["size"] <= max_easy_size else -50.0,
                                         prob=1.0 if r.extra_info["size"] <= max_easy_size else 0.0, slips=0.0)
                for r in records]
    return score


def test_a_run_drops_too_easy_problems_and_resumes_from_its_decision(tmp_path, tiny_model_dir, monkeypatch, capsys):
    run = tmp_path / "run"
    args = [f"model.path={tiny_model_dir}", *ARGS]
    monkeypatch.setattr(prefilter, "score_references", fake_judge(2))
    assert main(["train", "-o", str(run), *args, "train.steps=1"]) == 0
    out = capsys.readouterr().out
    rows, _ = load_prompts(load_run_config(None, args).data, load_tokenizer(tiny_model_dir), "train")
    hard = [i for i, r in enumerate(rows) if r.extra_info["size"] > 2]
    assert 0 < len(hard) < len(rows)
    decided = json.loads((run / "prefilter.json").read_text())
    assert decided["kept"] == hard and decided["k"] == 2  # k: rollout.group_size
    summary = json.loads((run / "summary.json").read_text())
    assert summary["prefilter"]["kept_rows"] == len(hard) and summary["prefilter"]["rows"] == len(rows)
    assert f"RL drew from {len(hard)} of {len(rows)} training rows" in out
    assert list(summary["phase_s"]) == ["start", "prefilter", "rl_steps", "checkpoints"]  # no warm start, no eval
    assert "time: start-up 0:" in out and ", prefilter 0:" in out and "; this process 0:" in out
    drawn = {json.loads(line)["prompt_id"] for line in (run / "samples.jsonl").read_text().splitlines()}
    assert drawn and drawn <= {rows[i].prompt_id for i in hard}

    # resuming never judges again (the policy is now a checkpoint's): it reads the run folder's decision
    def no_judging(*a, **kw):
        raise AssertionError("a resumed run judged the training problems again")
    monkeypatch.setattr(prefilter, "score_references", no_judging)
    saved = (run / "prefilter.json").read_text()
    (run / "prefilter.json").unlink()
    assert main(["train", "-o", str(run), "--resume", "auto", *args, "train.steps=2"]) == 2
    assert "resuming needs" in capsys.readouterr().err
    (run / "prefilter.json").write_text(saved)
    assert main(["train", "-o", str(run), "--resume", "auto", *args, "data.prefilter.hard_k=5", "train.steps=2"]) == 2
    assert "was decided with (method, k, too_easy, too_hard, hard_k) = ('exact', 2, True, False, 2)" in \
        capsys.readouterr().err
    assert main(["train", "-o", str(run), "--resume", "auto", *args, "train.steps=2"]) == 0
    assert "as decided at the start" in capsys.readouterr().out
    drawn = {json.loads(line)["prompt_id"] for line in (run / "samples.jsonl").read_text().splitlines()}
    assert drawn <= {rows[i].prompt_id for i in hard}
    assert json.loads((run / "summary.json").read_text())["steps"] == 2


def test_a_prefilter_that_leaves_nothing_is_refused(tmp_path, tiny_model_dir, monkeypatch, capsys):
    # the fake judge's p is 1 or 0: with too_hard as well every problem goes, and the run says so before RL
    monkeypatch.setattr(prefilter, "score_references", fake_judge(2))
    args = [f"model.path={tiny_model_dir}", *ARGS, "data.prefilter.too_hard=true", "train.steps=1"]
    assert main(["train", "-o", str(tmp_path / "run"), *args]) == 2
    assert "data.prefilter dropped every training problem" in capsys.readouterr().err


def test_prefilter_needs_worked_solutions(tmp_path, tiny_model_dir):
    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"{i} + 2", "answer": str(i + 2)}) + "\n" for i in range(3)))
    cfg = load_run_config(None, [f"model.path={tiny_model_dir}", *ARGS, f"data.train={data}"])
    from ulorl.run.session import open_session

    with pytest.raises(ConfigError, match=r"data.prefilter.method=exact: data.train=.*train.jsonl: row 0 .*solution"):
        open_session(cfg, tmp_path / "run")


def test_config_checks():
    with pytest.raises(ConfigError, match="data.prefilter.method='sometimes' is not allowed"):
        load_run_config(None, ["data.prefilter.method=sometimes"])
    with pytest.raises(ConfigError, match="data.prefilter.k must be >= 1"):
        load_run_config(None, ["data.prefilter.k=0"])
    with pytest.raises(ConfigError, match="data.prefilter.hard_k must be >= 1"):
        load_run_config(None, ["data.prefilter.hard_k=0"])
    with pytest.raises(ConfigError, match="too_easy and too_hard both false drops nothing"):
        load_run_config(None, ["data.prefilter.method=exact", "data.prefilter.too_easy=false"])
