"""The run's held-out comparison by solution length, and the exact P(worked solution) (`eval.reference`):
hand-computed pairs, and an end-to-end run whose reported probabilities are recomputed from its saved models."""

import json

import pytest

from ulorl.cli import main
from ulorl.config import ConfigError, load_run_config
from ulorl.config.evaluation import EvalConfig
from ulorl.data import load_prompts
from ulorl.evaluation.reference import score_references
from ulorl.models import eos_token_ids, load_model, load_tokenizer
from ulorl.rollout.engines.base import SamplingParams
from ulorl.run.held_out import paired_by_length, solution_tokens


def test_paired_by_length_hand_computed():
    # per-problem changes (out of k = 4): +0.25, 0, +0.5, 0; the long ones (>= 1000 tokens) are problems 1 and 2
    out = paired_by_length([0, 1, 2, 3], [1, 1, 4, 3], [10, 2000, 1500, 5], 1000, 4)
    assert out["all"]["delta"] == pytest.approx(0.1875) and out["all"]["num_problems"] == 4
    long = out["long"]
    assert long["num_problems"] == 2 and long["min_tokens"] == 1000
    assert long["delta"] == pytest.approx(0.25) and long["se"] == pytest.approx(0.25) and long["z"] == pytest.approx(1)
    assert "long" not in paired_by_length([0, 1], [1, 1], [10, 2000], 1000, 4)  # one long problem: no pair
    assert "long" not in paired_by_length([0, 1], [1, 1], None, 1000, 4)  # lengths unknown


def test_sampled_and_referenced_rows():
    rows = list(range(10))
    ev = EvalConfig(num_problems=3, reference=True, reference_problems=8)
    assert ev.sampled(rows) == [0, 1, 2] and ev.referenced(rows) == list(range(8))
    plain = EvalConfig(num_problems=3, reference=True)
    assert plain.referenced(rows) == plain.sampled(rows) == [0, 1, 2]
    assert EvalConfig().sampled(rows) == EvalConfig().referenced(rows) == rows  # num_problems None: every row
    with pytest.raises(ConfigError, match=r"reference_problems=8 but data.eval=x.jsonl has 5 rows; .*data.eval_size"):
        ev.referenced(rows[:5], "data.eval=x.jsonl")
    with pytest.raises(ConfigError, match="must be >= eval.num_problems .* got 2 with num_problems 3"):
        EvalConfig(num_problems=3, reference=True, reference_problems=2)
    with pytest.raises(ConfigError, match="got 5 with num_problems None"):
        EvalConfig(reference=True, reference_problems=5)


def test_solution_tokens_need_every_rows_solution(tiny_model_dir):
    tok = load_tokenizer(tiny_model_dir)
    cfg = load_run_config(None, [f"model.path={tiny_model_dir}", "data.eval_size=3"])
    rows, _ = load_prompts(cfg.data, tok, "eval")
    n = solution_tokens(tok, rows)
    assert n == [len(tok(r.extra_info["solution"], add_special_tokens=False)["input_ids"]) + 1 for r in rows]
    rows[1].extra_info = {}
    assert solution_tokens(tok, rows) is None


ARGS = ["model.warm_start=none", "train.steps=2", "train.eval_every=2", "train.train_groups=1",
        "rollout.group_size=2", "rollout.decode_batch=4", "rollout.max_response_len=16", "rollout.num_segments=2",
        "algo.dynamic_sampling=false", "data.train_size=20", "data.eval_size=6", "eval.k=2", "eval.pass_k=[1,2]",
        "eval.max_new_tokens=16", "logging.progress=false", "reward.num_workers=1", "train.lr=1e-2",
        "eval.reference=true", "eval.long_tokens=12", "eval.top_p=1.0", "eval.top_k=-1"]


def test_train_reports_the_exact_measure_of_its_saved_models(tmp_path, eos_model_dir, capsys):
    # rewards that differ within a group (soft length penalty), so the two updates move the weights. avg@k samples
    # the first 4 held-out problems, the exact measure scores all 6 (eval.reference_problems)
    run = tmp_path / "run"
    args = [f"model.path={eos_model_dir}", *ARGS, "reward.fn=exact", "reward.overlong=soft_penalty",
            "reward.overlong_buffer=16", "eval.num_problems=4", "eval.reference_problems=6", "eval.long_tokens=10"]
    assert main(["train", "-o", str(run), *args]) == 0
    out = capsys.readouterr().out
    summary = json.loads((run / "summary.json").read_text())
    cfg = load_run_config(None, args)
    tok = load_tokenizer(eos_model_dir)
    rows, _ = load_prompts(cfg.data, tok, "eval")
    params = SamplingParams(temperature=cfg.eval.temperature, top_p=cfg.eval.top_p, top_k=cfg.eval.top_k)
    probs, logprobs = {}, {}
    for label, path in (("before", eos_model_dir), ("after", run / "export")):
        model = load_model(path)
        scores = score_references(model, tok, rows, params, eos_token_ids(model, tok)[0])
        probs[label], logprobs[label] = [s.prob for s in scores], [s.logprob for s in scores]
    history = json.loads((run / "history.json").read_text())
    for label in ("before", "after"):  # the untrained model's probabilities underflow: its log-probs are compared
        assert history["eval_reference_logprob"][label] == pytest.approx(logprobs[label], rel=1e-5)
        assert history["eval_reference"][label] == pytest.approx(probs[label], rel=1e-4, abs=1e-30)
    assert logprobs["after"] != pytest.approx(logprobs["before"], rel=1e-3)  # lr 1e-2: the two steps moved them
    assert history["eval_reference_logprob"]["after"] == history["eval_reference_logprob"]["step2"]
    ref = summary["eval_reference"]
    assert ref["before"] == pytest.approx(sum(probs["before"]) / 6, rel=1e-4)
    assert ref["after"] == pytest.approx(sum(probs["after"]) / 6, rel=1e-4)
    assert ref["all"]["delta"] == pytest.approx(ref["after"] - ref["before"], rel=1e-4, abs=1e-12)
    assert ref["all"]["num_problems"] == 6 and summary["eval_paired"]["num_problems"] == 4
    assert len(history["eval_correct"]["before"]) == 4
    tokens = solution_tokens(tok, rows)
    n_long, n_long_sampled = sum(n >= 10 for n in tokens), sum(n >= 10 for n in tokens[:4])
    assert (n_long, n_long_sampled) == (3, 2)  # solutions of 13, 9, 11, 7, 131 and 7 tokens
    assert ref["long"]["num_problems"] == n_long
    assert summary["eval_paired_long"]["num_problems"] == n_long_sampled
    long_before = [p for p, n in zip(probs["before"], tokens) if n >= 10]
    assert summary["eval_before"]["reference/p_correct_long"] == pytest.approx(sum(long_before) / n_long, rel=1e-4)
    assert "held-out P(worked solution), exact, 6 problems: before" in out
    assert f"the {n_long} of >= 10 solution tokens" in out


def test_a_finished_run_given_more_steps_takes_its_final_evaluation_again(tmp_path, eos_model_dir, capsys):
    run = tmp_path / "run"
    args = [f"model.path={eos_model_dir}", *ARGS, "reward.fn=exact", "reward.overlong=soft_penalty",
            "reward.overlong_buffer=16"]
    assert main(["train", "-o", str(run), *args]) == 0
    first = json.loads((run / "history.json").read_text())["eval_reference_logprob"]
    capsys.readouterr()
    assert main(["train", "-o", str(run), "--resume", "auto", *args, "train.steps=3"]) == 0
    assert "train.steps raised to 3: the final held-out evaluation (of step 2) is taken again after step 3" in \
        capsys.readouterr().out
    history = json.loads((run / "history.json").read_text())
    summary = json.loads((run / "summary.json").read_text())
    cfg = load_run_config(None, args)
    tok, model = load_tokenizer(eos_model_dir), load_model(run / "export")  # step 3's policy
    rows, _ = load_prompts(cfg.data, tok, "eval")
    params = SamplingParams(temperature=cfg.eval.temperature, top_p=cfg.eval.top_p, top_k=cfg.eval.top_k)
    logprobs = [s.logprob for s in score_references(model, tok, rows, params, eos_token_ids(model, tok)[0])]
    after = history["eval_reference_logprob"]["after"]
    assert after == pytest.approx(logprobs, rel=1e-5)
    assert after != pytest.approx(first["after"], rel=1e-3)  # not step 2's, which the first run evaluated
    assert history["eval_reference_logprob"]["before"] == first["before"]
    assert summary["steps"] == 3 and summary["eval_after"] == history["eval"]["after"]


def test_reference_needs_the_held_out_solutions(tmp_path, tiny_model_dir):
    rows = [{"prompt": "2 + 2", "answer": "4"}, {"prompt": "1 + 2", "answer": "3"}]
    data = tmp_path / "eval.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = load_run_config(None, [f"model.path={tiny_model_dir}", *ARGS, f"data.eval={data}"])
    from ulorl.run.session import open_session

    with pytest.raises(ConfigError, match=r"eval.reference=true: data.eval=.*eval.jsonl: row 0 .*extra_info.solution"):
        open_session(cfg, tmp_path / "run")


def test_a_pass_k_above_k_that_the_user_set_is_noted():
    """`eval.pass_k` values above `eval.k` are not reported: said once at the start when the user set the list
    (they were dropped silently; `ulorl eval` refuses them as flags), not for the default list, nor without a
    held-out set."""
    from ulorl.run.session import pass_k_note

    note = pass_k_note(load_run_config(None, ["eval.k=2", "eval.pass_k=[1,64,8]"]))
    assert note == ("note: eval.pass_k 8, 64 above eval.k=2 are not reported (pass@k needs k samples a problem); "
                    "raise eval.k to 64 to report them")
    assert pass_k_note(load_run_config(None, ["eval.k=2"])) is None  # the default [1, 8, 32]
    assert pass_k_note(load_run_config(None, ["eval.k=2", "eval.pass_k=[1,2]"])) is None
    assert pass_k_note(load_run_config(None, ["eval.k=2", "eval.pass_k=[64]", "data.eval=null"])) is None
