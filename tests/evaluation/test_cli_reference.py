"""`ulorl eval --reference`: the exact P(worked solution) of each problem in results.json, as
`ulorl.evaluation.reference` computes it, and a clear error for data without worked solutions."""

import json

import pytest

from ulorl.cli import main
from ulorl.config import DataConfig
from ulorl.data.loaders import load_source
from ulorl.evaluation.reference import score_references
from ulorl.models import eos_token_ids, load_model, load_tokenizer
from ulorl.rollout.engines.base import SamplingParams

ARGS = ["--data", "builtin:chain", "--num-problems", "3", "--k", "1", "--pass-k", "1", "--max-new-tokens", "8",
        "--top-p", "1.0", "--top-k", "-1"]


@pytest.mark.parametrize("scored", [3, 5])  # 5: two problems beyond the 3 sampled (--reference-problems)
def test_reference_scores_every_problem(tmp_path, eos_model_dir, capsys, scored):
    out = tmp_path / "ev"
    extra = ["--reference-problems", str(scored)] if scored > 3 else []
    assert main(["eval", "--model", str(eos_model_dir), *ARGS, "--reference", "--long-tokens", "30", *extra,
                 "-o", str(out)]) == 0
    res = json.loads((out / "results.json").read_text())["datasets"]["builtin:chain"]
    tok, model = load_tokenizer(eos_model_dir), load_model(eos_model_dir)
    records, _ = load_source("builtin:chain", tok, DataConfig(max_prompt_len=4096), split="eval")
    every = score_references(model, tok, records[:scored], SamplingParams(temperature=0.85, top_p=1.0, top_k=-1),
                             eos_token_ids(model, tok)[0])
    scores = every[:3]
    rows = res["per_problem"]
    assert len(rows) == 3 and res["summary"]["reference/problems"] == scored
    assert [(r["prompt_id"], r["reference_tokens"]) for r in res["reference_only"]] == [
        (rec.prompt_id, s.tokens) for rec, s in zip(records[3:scored], every[3:])]
    assert [r["reference_prob"] for r in res["reference_only"]] == pytest.approx(
        [s.prob for s in every[3:]], rel=1e-5, abs=1e-300)
    assert [r["reference_tokens"] for r in rows] == [s.tokens for s in scores]
    assert [r["reference_tokens"] for r in rows] == [
        len(tok(r.extra_info["solution"], add_special_tokens=False)["input_ids"]) + 1 for r in records[:3]]
    assert [r["reference_prob"] for r in rows] == pytest.approx([s.prob for s in scores], rel=1e-5, abs=1e-300)
    assert res["summary"]["reference/p_correct"] == pytest.approx(sum(s.prob for s in every) / scored, abs=1e-300)
    assert ("reference/p_correct_long" in res["summary"]) == any(s.tokens >= 30 for s in every)
    assert "reference/p_correct=" in capsys.readouterr().out


def test_reference_without_worked_solutions_names_the_file_and_row(tmp_path, tiny_model_dir, capsys):
    data = tmp_path / "qa.jsonl"
    data.write_text(json.dumps({"prompt": "1 + 1", "answer": "2"}) + "\n")
    rc = main(["eval", "--model", str(tiny_model_dir), "--data", str(data), "--k", "1", "--reference",
               "-o", str(tmp_path / "ev")])
    assert rc != 0 and not (tmp_path / "ev").exists()  # refused before any sample is drawn
    err = capsys.readouterr().err
    assert "--reference:" in err and "qa.jsonl: row 0" in err and "extra_info.solution" in err


def test_a_bad_row_names_the_flag_that_skips_it(tmp_path, tiny_model_dir, capsys):
    data = tmp_path / "qa.jsonl"
    data.write_text(json.dumps({"prompt": "1 + 1", "answer": "2"}) + "\n" + json.dumps({"prompt": 5}) + "\n")
    rc = main(["eval", "--model", str(tiny_model_dir), "--data", str(data), "--k", "1", "-o", str(tmp_path / "ev")])
    err = capsys.readouterr().err
    assert rc != 0 and "qa.jsonl: row 1, field 'prompt'" in err and "set --on-bad-row skip" in err, err
    assert "data.on_bad_row" not in err  # `ulorl eval` has no such setting on its command line


def test_eval_past_the_models_positions_is_warned(tmp_path, tiny_model_dir, capsys):
    """A copy of the tiny model that says it was made for 64 positions: prompts of the chain task plus 64 new
    tokens pass them, and the run says so before sampling."""
    import shutil

    model = tmp_path / "model"
    shutil.copytree(tiny_model_dir, model)
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "max_position_embeddings": 64}))
    common = ["eval", "--model", str(model), "--data", "builtin:chain", "--num-problems", "2", "--k", "1",
              "--pass-k", "1", "-o", str(tmp_path / "ev")]
    assert main([*common, "--max-new-tokens", "64"]) == 0
    out = capsys.readouterr().out
    assert "warning: the longest prompt (" in out and "+ --max-new-tokens (64) = " in out
    assert "positions, past the 64 of " in out
    assert main([*common, "--max-new-tokens", "4"]) == 0  # chain prompts are under 60 tokens: no warning
    assert "warning: the longest prompt" not in capsys.readouterr().out


def test_eval_of_the_builtin_model_says_it_is_untrained(tmp_path, tiny_model_dir, capsys):
    common = ["--data", "builtin:chain", "--num-problems", "1", "--k", "1", "--pass-k", "1", "--max-new-tokens", "4"]
    assert main(["eval", "--model", "builtin", *common, "-o", str(tmp_path / "a")]) == 0
    assert "note: --model builtin is the built-in tiny model with random weights" in capsys.readouterr().out
    assert main(["eval", "--model", str(tiny_model_dir), *common, "-o", str(tmp_path / "b")]) == 0
    assert "note: --model" not in capsys.readouterr().out  # a folder: whatever it holds, no note


def test_eval_of_a_runs_model_points_to_the_runs_config(tmp_path, tiny_model_dir, capsys):
    """A model inside a run folder (its export, a checkpoint's policy) is scored with eval's defaults unless the
    run's config is given; the note says how to score it as the run's report did."""
    import shutil

    from ulorl.evaluation.cli import run_config_of

    run = tmp_path / "run"
    shutil.copytree(tiny_model_dir, run / "export")
    (run / "checkpoints" / "step_000002" / "model").mkdir(parents=True)
    (run / "config.yaml").write_text("eval:\n  k: 1\n  max_new_tokens: 4\n")
    config = (run / "config.yaml").resolve()
    assert run_config_of(str(run / "export")).resolve() == config
    assert run_config_of(str(run / "checkpoints" / "step_000002" / "model")).resolve() == config
    assert run_config_of(str(run / "model.gguf")) is None  # not a folder: a file, a package's name
    (tmp_path / "other" / "model").mkdir(parents=True)
    (tmp_path / "other" / "config.yaml").write_text("model:\n  path: x\n")  # no eval section: not a run's
    assert run_config_of(str(tmp_path / "other" / "model")) is None
    (tmp_path / "other" / "config.yaml").write_text("eval:\n  k: 1\ndata:\n  eval: null\n")
    assert run_config_of(str(tmp_path / "other" / "model")) is None  # a run with no held-out set: nothing to score on
    (tmp_path / "other" / "config.yaml").write_text("eval:\n  k: 1\ndata:\n  eval: my.jsonl\n")
    assert run_config_of(str(tmp_path / "other" / "model")).resolve() == (tmp_path / "other" / "config.yaml").resolve()

    common = ["--data", "builtin:chain", "--num-problems", "1", "--k", "1", "--pass-k", "1", "--max-new-tokens", "4"]
    assert main(["eval", "--model", str(run / "export"), *common, "-o", str(tmp_path / "a")]) == 0
    out = capsys.readouterr().out
    shown = run_config_of(str(run / "export"))  # relative to the working folder where below it
    assert f"note: {run / 'export'} comes from the run in {shown.parent}" in out and f"--config {shown} " in out
    assert main(["eval", "--model", str(run / "export"), "--config", str(run / "config.yaml"), *common,
                 "-o", str(tmp_path / "b")]) == 0
    assert "comes from the run" not in capsys.readouterr().out
