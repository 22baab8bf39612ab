"""`ulorl eval`'s output folder: runs/eval-<timestamp> by default, an earlier evaluation's files moved aside (never
overwritten), and an unusable folder refused before anything is sampled."""

import json

from ulorl.cli import main
from ulorl.evaluation import cli as eval_cli

ARGS = ["--data", "builtin:chain", "--num-problems", "2", "--k", "1", "--pass-k", "1", "--max-new-tokens", "4"]


def test_an_earlier_evaluation_is_moved_aside_and_the_default_folder_is_new(tmp_path, tiny_model_dir, capsys,
                                                                           monkeypatch):
    out = tmp_path / "ev"
    assert main(["eval", "--model", str(tiny_model_dir), *ARGS, "--seed", "1", "-o", str(out)]) == 0
    first = json.loads((out / "results.json").read_text())
    capsys.readouterr()
    assert main(["eval", "--model", str(tiny_model_dir), *ARGS, "--seed", "2", "-o", str(out)]) == 0
    aside = [d for d in out.iterdir() if d.name.startswith("earlier-")]
    assert len(aside) == 1
    assert f"starting over: the earlier evaluation's results.json, report.md moved to {aside[0]}" in \
        capsys.readouterr().out
    assert json.loads((aside[0] / "results.json").read_text()) == first
    assert json.loads((out / "results.json").read_text())["datasets"]["builtin:chain"]["config"]["seed"] == 2
    monkeypatch.chdir(tmp_path)  # no --output: a new folder under runs/ each time
    assert main(["eval", "--model", str(tiny_model_dir), *ARGS]) == 0
    made = list((tmp_path / "runs").iterdir())
    assert len(made) == 1 and made[0].name.startswith("eval-") and (made[0] / "results.json").is_file()


def test_an_output_that_is_a_file_fails_before_the_evaluation(tmp_path, tiny_model_dir, capsys, monkeypatch):
    (tmp_path / "afile").write_text("x")
    monkeypatch.setattr(eval_cli, "evaluate", lambda *a, **k: (_ for _ in ()).throw(AssertionError("sampled")))
    assert main(["eval", "--model", str(tiny_model_dir), *ARGS, "-o", str(tmp_path / "afile")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("ulorl eval: error: ") and "afile" in err and "exists and is not a folder" in err
    assert (tmp_path / "afile").read_text() == "x"


def test_a_source_without_one_usable_prompt_fails_before_the_model_loads(tmp_path, tiny_model_dir, capsys,
                                                                        monkeypatch):
    # it was a traceback from the evaluator, after the model and the engine had loaded
    monkeypatch.setattr(eval_cli, "output_dir", lambda *a: (_ for _ in ()).throw(AssertionError("model loaded")))
    empty, long = tmp_path / "empty.jsonl", tmp_path / "long.jsonl"
    empty.write_text("")
    long.write_text(json.dumps({"prompt": "one two three four five six seven", "answer": "1"}) + "\n")
    expected = {empty: "0/0 rows loaded, 0 bad rows skipped, 0 prompts too long dropped: no usable prompts",
                long: "0/1 rows loaded, 0 bad rows skipped, 1 prompt too long dropped: no usable prompts; raise "
                      "--max-prompt-len (now 8 tokens) to keep the long ones"}
    for source, summary in expected.items():
        argv = ["eval", "--model", str(tiny_model_dir), *ARGS[2:], "--data", str(source), "--max-prompt-len", "8",
                "-o", str(tmp_path / "ev")]
        assert main(argv) == 2
        assert capsys.readouterr().err == f"ulorl eval: error: {source}: {summary}\n"
    assert not (tmp_path / "ev").exists()
