"""SFT warm start and the CLI end to end on the tiny model (short runs)."""

import json

import pytest
from transformers import AutoModelForCausalLM, AutoTokenizer

from ulorl.cli import build_parser, main
from ulorl.config import ModelConfig, SFTConfig, load_run_config
from ulorl.data import load_prompts
from ulorl.evaluation.reference import score_eval_references
from ulorl.models import load_model, load_tokenizer
from ulorl.run.sft import run_sft


def test_sft_loss_goes_down_and_saves_a_loadable_model(tmp_path, tiny_model_dir):
    out = run_sft(ModelConfig(path=str(tiny_model_dir)), SFTConfig(steps=40, lr=3e-3, num_examples=200, batch_size=16),
                  tmp_path / "sft", progress=False)
    losses = [json.loads(l)["sft/loss"] for l in (tmp_path / "sft" / "metrics.jsonl").read_text().splitlines()]
    assert len(losses) == 40
    assert sum(losses[-5:]) / 5 < 0.6 * sum(losses[:5]) / 5  # the loss falls by more than 40%
    assert (tmp_path / "sft" / "loss.png").stat().st_size > 0
    model = AutoModelForCausalLM.from_pretrained(out)
    tok = AutoTokenizer.from_pretrained(out)
    prompt = tok.apply_chat_template([{"role": "user", "content": "chain start 1 steps 2"}], tokenize=False,
                                     add_generation_prompt=True)
    ids = tok(prompt, return_tensors="pt", add_special_tokens=False)
    gen = model.generate(**ids, max_new_tokens=8, do_sample=False, pad_token_id=tok.pad_token_id)
    assert gen.shape[1] > ids["input_ids"].shape[1]


def test_sft_threads_train_the_same_weights_and_restore_the_count(tmp_path, tiny_model_dir, monkeypatch):
    """`sft.threads` sets torch's thread count for the SFT only; on CPU its ops give the weights of one thread."""
    import torch
    from safetensors.torch import load_file

    cfg = dict(steps=6, lr=3e-3, num_examples=100, batch_size=8)
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        one = run_sft(ModelConfig(path=str(tiny_model_dir)), SFTConfig(**cfg), tmp_path / "one", progress=False)
        seen = []
        real = torch.optim.AdamW.step

        def step(self, *a, **k):  # the count while the SFT trains
            seen.append(torch.get_num_threads())
            return real(self, *a, **k)

        monkeypatch.setattr(torch.optim.AdamW, "step", step)
        two = run_sft(ModelConfig(path=str(tiny_model_dir)), SFTConfig(**cfg, threads=2), tmp_path / "two",
                      progress=False)
        assert set(seen) == {2} and torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
    a, b = load_file(one / "model.safetensors"), load_file(two / "model.safetensors")
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_sft_command_uses_train_threads_as_train_does(tmp_path, monkeypatch, capsys):
    """`ulorl sft` sets `train.threads` before SFT as `ulorl train` does: a config's warm start runs with one thread
    count under both commands (the count changes torch's reduction order)."""
    import torch

    import ulorl.run.sft_report as sft_report

    seen = []
    report = {"model": "m", "sft": {"steps": 0}, "eval": None}
    monkeypatch.setattr(sft_report, "sft_and_report",
                        lambda cfg, run_dir: seen.append(torch.get_num_threads()) or report)
    before = torch.get_num_threads()
    try:
        assert main(["sft", "-o", str(tmp_path / "a"), "train.threads=1"]) == 0
        torch.set_num_threads(2)
        assert main(["sft", "-o", str(tmp_path / "b"), "train.threads=0"]) == 0  # 0: torch's own count, untouched
    finally:
        torch.set_num_threads(before)
    assert seen == [1, 2]


def test_help_describes_every_command(capsys):
    parser = build_parser()
    with pytest.raises(SystemExit):
        parser.parse_args(["--help"])
    text = capsys.readouterr().out
    for cmd in ("train", "sft", "eval", "clean", "plot", "config"):
        assert cmd in text
    for cmd in ("train", "sft", "eval", "clean", "plot", "config"):
        with pytest.raises(SystemExit):
            parser.parse_args([cmd, "--help"])
        assert "usage: ulorl " + cmd in capsys.readouterr().out


def test_config_errors_exit_2_with_a_message(capsys):
    assert main(["config", "rollout.num_segments=7"]) == 2
    assert "rollout.num_segments=7 must divide" in capsys.readouterr().err


def test_train_end_to_end_on_the_tiny_model(tmp_path, tiny_model_dir, capsys, monkeypatch):
    import ulorl.run.loop

    labels = []
    real = ulorl.run.loop.evaluate_policy
    monkeypatch.setattr(ulorl.run.loop, "evaluate_policy", lambda s, label: labels.append(label) or real(s, label))
    run = tmp_path / "run"
    rc = main(["train", "-o", str(run), f"model.path={tiny_model_dir}", "model.warm_start=none",
               "train.steps=2", "train.eval_every=2", "train.train_groups=1", "rollout.group_size=2",
               "rollout.decode_batch=4", "rollout.max_response_len=16", "rollout.num_segments=2",
               "algo.dynamic_sampling=false",
               "data.train_size=20", "data.eval_size=4", "eval.k=2", "eval.pass_k=[1,2]", "eval.max_new_tokens=16",
               "logging.progress=false", "reward.num_workers=1", "train.lr=1e-3"])
    assert rc == 0
    captured = capsys.readouterr()
    out = captured.out
    assert "sample/s" not in captured.err  # logging.progress=false: no progress bar, the evaluations' included
    assert "=== ulorl train: summary ===" in out and "held-out avg@k" in out and str(run) in out
    for name in ("config.yaml", "metrics.jsonl", "samples.jsonl", "summary.json", "checkpoints/latest"):
        assert (run / name).exists(), name
    metrics = [json.loads(l) for l in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2]
    required = ["actor/entropy", "actor/pg_loss", "actor/pg_clipfrac", "actor/dmmpt_mask_ratio", "actor/grad_norm",
                "critic/score/mean", "response_length/mean", "response_length/max", "response_length/clip_ratio",
                "rollout/unfinished_pool", "rollout/experience_pool", "rollout/new_prompts",
                "rollout/segments_per_sample", "rollout/reprefill_tokens", "rollout/max_staleness", "timing_s/gen",
                "timing_s/reward", "timing_s/update", "timing_s/step", "perf/throughput"]
    for key in required:
        assert key in metrics[-1], key
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == 2 and summary["trained_samples"] == 4
    assert set(summary["eval_before"]) >= {"avg@k", "pass@1", "pass@2"}
    assert labels == ["before", "step2"]  # the evaluation at the last step is the final one, not sampled twice
    assert metrics[-1]["eval/avg@k"] == summary["eval_after"]["avg@k"]
    paired = summary["eval_paired"]  # the same 4 problems before and after: the change in avg@k, paired
    assert paired["num_problems"] == 4 and paired["better"] + paired["worse"] + paired["same"] == 4
    assert paired["delta"] == pytest.approx(summary["eval_after"]["avg@k"] - summary["eval_before"]["avg@k"])
    assert "paired over 4 problems" in out


def test_sft_without_an_eval_set_saves_the_warm_start_and_says_so(tmp_path, tiny_model_dir, capsys):
    run = tmp_path / "sft"
    assert main(["sft", "-o", str(run), f"model.path={tiny_model_dir}", "sft.steps=3", "sft.num_examples=16",
                 "data.eval=null", "logging.progress=false"]) == 0
    report = json.loads((run / "sft_report.json").read_text())
    assert report["eval"] is None and (run / "model" / "config.json").exists()
    out = capsys.readouterr().out
    assert "data.eval is null: the warm start is not evaluated" in out
    # the closing summary: steps, no held-out line, the model and the command that starts RL from it
    summary = out[out.index("=== ulorl sft: summary ==="):].splitlines()
    assert summary[1] == "steps: 3" and not any(ln.startswith("held-out") for ln in summary)
    assert f"  RL from it:    ulorl train model.path={run / 'model'} model.warm_start=none" in summary
    assert summary[-1] == f"report: {run / 'sft_report.json'}"


def test_a_second_sft_in_a_folder_moves_the_first_aside_and_a_train_runs_folder_is_refused(tmp_path, tiny_model_dir,
                                                                                               capsys):
    run = tmp_path / "sft"
    args = [f"model.path={tiny_model_dir}", "sft.steps=2", "sft.num_examples=8", "data.eval=null",
            "logging.progress=false"]
    assert main(["sft", "-o", str(run), *args, "sft.lr=1e-3"]) == 0
    first = (run / "model" / "model.safetensors").read_bytes()
    capsys.readouterr()
    assert main(["sft", "-o", str(run), *args, "sft.lr=2e-3"]) == 0
    out = capsys.readouterr().out
    aside = [d for d in run.iterdir() if d.name.startswith("earlier-")]
    assert len(aside) == 1
    assert f"starting over: the earlier SFT's model, metrics.jsonl, loss.png, sft_report.json, config.yaml, " \
           f"sft_settings.json moved to {aside[0]}" in out
    assert (aside[0] / "model" / "model.safetensors").read_bytes() == first  # kept, not overwritten
    assert "lr: 0.001" in (aside[0] / "config.yaml").read_text() and "lr: 0.002" in (run / "config.yaml").read_text()
    assert (run / "model" / "model.safetensors").read_bytes() != first
    # a `ulorl train` run's folder: refused before anything is written or moved
    train_run = tmp_path / "train"
    (train_run / "checkpoints").mkdir(parents=True)
    (train_run / "metrics.jsonl").write_text("{}\n")
    assert main(["sft", "-o", str(train_run), *args]) == 2
    err = capsys.readouterr().err
    assert f"ulorl sft: error: {train_run} holds a `ulorl train` run (checkpoints): an SFT there would overwrite its " \
           "config.yaml and metrics.jsonl; choose another --output-dir" in err
    assert sorted(p.name for p in train_run.iterdir() if p.name != ".lock") == ["checkpoints", "metrics.jsonl"]
    assert (train_run / "metrics.jsonl").read_text() == "{}\n"


def test_sft_report_has_the_exact_measure_with_eval_reference(tmp_path, tiny_model_dir, capsys):
    # avg@k samples 2 held-out problems, the exact measure scores 3 (eval.reference_problems)
    run = tmp_path / "sft"
    args = [f"model.path={tiny_model_dir}", "sft.steps=3", "sft.num_examples=16", "data.eval_size=3", "eval.k=1",
            "eval.pass_k=[1]", "eval.max_new_tokens=8", "eval.reference=true", "eval.long_tokens=1",
            "eval.num_problems=2", "eval.reference_problems=3", "logging.progress=false"]
    assert main(["sft", "-o", str(run), *args]) == 0
    report = json.loads((run / "sft_report.json").read_text())
    assert report["sft"] == {"steps": 3, "p_long": None, "p_valid": None}  # no checks
    ev = report["eval"]
    assert ev["num_problems"] == 2 and ev["reference/problems"] == 3
    assert (f"held-out (2 problems, k = 1): avg@k {ev['avg@k']:.4f}  pass@1 {ev['pass@1']:.4f}"
            in capsys.readouterr().out.splitlines())
    cfg, tok, model = load_run_config(None, args), load_tokenizer(run / "model"), load_model(run / "model")
    rows, _ = load_prompts(cfg.data, tok, "eval")
    scores = score_eval_references(model, tok, rows, cfg.eval)
    assert len(rows) == 3 and ev["reference/p_correct"] == pytest.approx(sum(s.prob for s in scores) / 3,
                                                                          rel=1e-4, abs=1e-30)
    assert ev["reference/p_correct_long"] == ev["reference/p_correct"]  # every solution has >= 1 token


def test_sft_until_p_ends_at_the_first_check_that_meets_it_or_goes_on_at_the_last_lr(tmp_path, tiny_model_dir,
                                                                                       capsys):
    """`sft.until_p` ends the SFT at the first check (every `sft.check_every` steps) whose mean exact P(worked
    solution) of validation problems from the SFT's own size law reaches it; while none does, the SFT goes on past
    `sft.steps` at the schedule's last learning rate, up to `sft.max_steps`."""
    from ulorl.config import ConfigError
    from ulorl.rollout.engines.base import SamplingParams
    from ulorl.run.sft import lr_at, mean_p_reference, sft_outcome, sft_sequences, valid_sequences

    with pytest.raises(ConfigError, match="sft.until_p ends the SFT at a check: it needs sft.check_every > 0"):
        SFTConfig(until_p=0.7, max_steps=400)
    with pytest.raises(ConfigError, match="needs sft.max_steps, the SFT's most steps, at least sft.steps=300; got 200"):
        SFTConfig(until_p=0.7, check_every=10, max_steps=200)
    with pytest.raises(ConfigError, match="got None"):
        SFTConfig(until_p=0.7, check_every=10)
    with pytest.raises(ConfigError, match="sft.max_steps caps the steps that sft.until_p adds"):
        SFTConfig(max_steps=400)
    with pytest.raises(ConfigError, match="sft.until_p must be in"):
        SFTConfig(until_p=1.5, check_every=10, max_steps=400)

    base = dict(steps=8, warmup_steps=2, lr=3e-3, num_examples=100, batch_size=8)
    checked = dict(check_every=3, check_problems=4, max_steps=14)
    assert SFTConfig(**base).length_text == "8 steps"  # what `ulorl train` says it makes
    said = "until the validation P(worked solution) >= 0.5 at a check, at most 14 steps"
    assert SFTConfig(**base, **checked, until_p=0.5).length_text == said
    tok = load_tokenizer(str(tiny_model_dir))
    valid = valid_sequences(tok, SFTConfig(**base, **checked, until_p=0.5))
    assert len(valid) == 4 and all(r[-1] == tok.eos_token_id for _, r in valid)  # whole solutions
    assert [p for p, _ in valid] != [p for p, _ in sft_sequences(tok, 4, 0, 64)]  # their own draw, not the SFT's

    def rows(name, **kw):
        run_sft(ModelConfig(path=str(tiny_model_dir)), SFTConfig(**base, **kw), tmp_path / name, progress=False)
        return [json.loads(l) for l in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]

    plain = rows("plain")
    capsys.readouterr()
    ended = rows("ended", **checked, until_p=0.0)  # every check reaches 0: the SFT ends at the first
    assert len(ended) == 3 and ["sft/p_valid" in r for r in ended] == [False, False, True]
    assert "mean P(worked solution) 0.000 >= sft.until_p=0.0 at step 3: the SFT ends there" in capsys.readouterr().out
    assert sft_outcome(tmp_path / "ended") == {"steps": 3, "p_long": None, "p_valid": ended[-1]["sft/p_valid"]}

    longer = rows("longer", **checked, until_p=1.0)  # P = 1 exactly is never reached: on to max_steps
    said = capsys.readouterr().out
    assert "is under sft.until_p=1.0 after 8 steps: the SFT goes on at its last learning rate" in said
    assert "stops at sft.max_steps=14" in said
    assert len(longer) == 14 and [r["step"] for r in longer if "sft/p_valid" in r] == [3, 6, 9, 12]
    cfg = SFTConfig(**base)
    assert [r["sft/lr"] for r in longer] == [lr_at(i, cfg) for i in range(8)] + [lr_at(7, cfg)] * 6
    # the checks change nothing in the training: the same losses as without them, step for step
    assert [r["sft/loss"] for r in longer[:8]] == [r["sft/loss"] for r in plain]
    assert [r["sft/loss"] for r in ended] == [r["sft/loss"] for r in plain[:3]]
    cut = rows("cut", **{**checked, "max_steps": 12}, until_p=1.0)
    saved = load_model(str(tmp_path / "cut" / "model"))  # the last check's model, scored again
    assert cut[-1]["sft/p_valid"] == pytest.approx(mean_p_reference(saved, valid, SamplingParams()), rel=1e-5,
                                                    abs=1e-30)


def test_a_run_with_a_warm_start_loads_its_data_once(tmp_path, tiny_model_dir, capsys, monkeypatch):
    """The data is loaded before the SFT (a bad row stops the run before the SFT's minutes) and the session takes
    that load: each split is read and tokenized once, and its report line is printed once."""
    import ulorl.run.session as session

    loads = []
    real = session.load_prompts
    monkeypatch.setattr(session, "load_prompts", lambda cfg, tok, split: loads.append(split) or real(cfg, tok, split))
    assert main(["train", "-o", str(tmp_path / "run"), f"model.path={tiny_model_dir}", "sft.steps=2",
                 "sft.num_examples=8", "sft.batch_size=4", "data.train_size=20", "data.eval_size=2", "eval.k=1",
                 "eval.pass_k=[1]", "eval.max_new_tokens=4", "rollout.max_response_len=8", "rollout.group_size=2",
                 "rollout.decode_batch=4", "train.train_groups=1", "train.steps=1", "algo.dynamic_sampling=false",
                 "logging.progress=false", "logging.loggers=[jsonl]"]) == 0
    out = capsys.readouterr().out
    assert loads == ["train", "eval"]
    assert out.count("train data: builtin:chain: 20/20 rows loaded") == 1 and out.count("eval data: ") == 1
    assert out.index("SFT warm start (2 steps)") < out.index("train data: ")  # printed when the session starts
