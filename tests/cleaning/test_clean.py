"""The cleaning pipeline: each step on hand-made rows, the report, the CLI, and the model-based steps."""

from __future__ import annotations

import argparse
import json

import pyarrow.parquet as pq
import pytest

from ulorl.cleaning.clean import add_clean_arguments, clean_rows, run_clean
from ulorl.cleaning.steps import CleanOptions, parse_steps
from ulorl.tasks.chain import make_rows, score_chain


def row(q: str, a: str) -> dict:
    return {"prompt": q, "answer": a, "data_source": "hand"}


def chain_score(responses, gts, sources):
    return [score_chain(r, g) for r, g in zip(responses, gts)]


class ScriptedSampler:
    """Answers every question with the same scripted responses (k of them)."""

    def __init__(self, responses: list[str]):
        self.responses, self.calls = responses, 0

    def __call__(self, messages_list, k):
        self.calls += 1
        assert all(m[-1]["role"] == "user" for m in messages_list)
        return [list(self.responses[:k]) for _ in messages_list]


def test_rule_steps_in_order_and_report():
    rows = [row("Find (a) x and (b) y.", "1"),
            row("What is 2+2?\nA. 3\nB. 4", "B"),
            row("Compute 3+4.", "The answer is $7$."),
            row("Compute the matrix.", "\\begin{pmatrix}1\\end{pmatrix}"),
            row("Compute 1+1.", "2")]
    out, rep = clean_rows(rows, "multi_question,choice_to_short,short_answer,long_answer")
    assert out == [row("What is 2+2?", "4"), row("Compute 3+4.", "7"), row("Compute 1+1.", "2")]
    by = {s.name: s for s in rep.steps}
    assert (rep.n_in, rep.n_out) == (5, 3)
    assert [st.name for st in rep.steps] == ["choice_to_short", "multi_question", "short_answer", "long_answer"]
    assert (by["multi_question"].n_in, by["multi_question"].n_removed) == (5, 1)
    assert by["choice_to_short"].reasons == {"changed: choice converted to short answer": 1}
    assert by["short_answer"].reasons == {"changed: answer prefix+trailing period+math delimiters": 1}
    assert by["long_answer"].reasons == {"removed: matrix or array": 1}
    ex = by["choice_to_short"].examples[0]
    assert (ex["row"], ex["new_question"], ex["new_answer"]) == (1, "What is 2+2?", "4")
    assert by["multi_question"].examples[0]["row"] == 0


def test_inline_choices_are_converted_not_dropped_as_multi_part():
    rows = [row("What is 1+1? (a) 2 (b) 3", "(a)"), row("Find (a) x and (b) y.", "1")]
    out, rep = clean_rows(rows, "multi_question,choice_to_short")  # given in any order, run in pipeline order
    assert out == [row("What is 1+1?", "2")]
    assert {s.name: s.n_removed for s in rep.steps} == {"choice_to_short": 0, "multi_question": 1}


def test_verl_rows_change_the_nested_answer_and_last_user_message():
    r = make_rows(1, seed=0)[0]
    r["prompt"] = [{"role": "system", "content": "sys"}, {"role": "user", "content": "Pick:\n(A) 4\n(B) 5"}]
    r["reward_model"]["ground_truth"] = "(B)"
    (out,), _ = clean_rows([r], ["choice_to_short"])
    assert out["reward_model"] == {"style": "rule", "ground_truth": "5"}
    assert out["prompt"] == [{"role": "system", "content": "sys"}, {"role": "user", "content": "Pick:"}]
    assert r["reward_model"]["ground_truth"] == "(B)"  # input rows are not mutated


def test_unknown_step_lists_valid_ones():
    with pytest.raises(ValueError, match=r"unknown cleaning step 'typo'; valid steps: \['choice_to_short'"):
        parse_steps("short_answer,typo")


def test_model_step_without_model_fails():
    with pytest.raises(ValueError, match="need at least one model"):
        clean_rows([row("q", "1")], ["too_easy"], score_fn=chain_score)


def test_too_easy_drop_path_scripted():
    rows = [row("chain start 1 mul 1 add 1 steps 1", "2"), row("chain start 1 mul 1 add 1 steps 2", "3")]
    sampler = ScriptedSampler(["1 2 answer 2"] * 4)  # always answers 2: right for row 0 only
    out, rep = clean_rows(rows, ["too_easy"], k=4, samplers=[sampler], score_fn=chain_score)
    assert out == [rows[1]]
    assert rep.steps[0].reasons == {"removed: all 4 samples correct": 1}
    assert rep.steps[0].examples[0]["note"] == "model 0: 4/4 correct"
    # 3 of 4 right is not "too easy"
    out, _ = clean_rows(rows[:1], ["too_easy"], k=4, samplers=[ScriptedSampler(["answer 2"] * 3 + ["answer 9"])],
                        score_fn=chain_score)
    assert out == rows[:1]


def test_consensus_drops_a_confidently_contradicted_reference():
    from ulorl.reward import extract_answer

    rows = [row("q0", "5"), row("q1", "7"), row("q2", "4")]
    a = ScriptedSampler(["\\boxed{7}"] * 3 + ["\\boxed{1}"])
    b = ScriptedSampler(["\\boxed{7}"] * 4)
    opts = CleanOptions(k=4, consensus_threshold=0.75)  # 7 of 8 samples say 7

    def boxed_score(responses, gts, sources):
        return [float(extract_answer(r) == g) for r, g in zip(responses, gts)]

    out, rep = clean_rows(rows, ["consensus"], options=opts, samplers=[a, b], score_fn=boxed_score,
                          extract_fn=extract_answer)
    assert out == [rows[1]]  # the reference 7 agrees with the consensus
    assert rep.steps[0].n_removed == 2 and rep.steps[0].examples[0]["note"] == "majority answer '7' in 7/8 samples"
    strict = CleanOptions(k=4, consensus_threshold=0.9)  # 7/8 < 0.9: no confident consensus, keep all
    out, _ = clean_rows(rows, ["consensus"], options=strict, samplers=[a, b], score_fn=boxed_score,
                        extract_fn=extract_answer)
    assert out == rows


def run_cli(argv: list[str]) -> int:
    return run_clean(add_clean_arguments(argparse.ArgumentParser()).parse_args(argv))


def test_cli_jsonl_writes_cleaned_file_and_report(tmp_path, capsys):
    inp = tmp_path / "in.jsonl"
    rows = [row("Compute 3+4.", "\\boxed{7}"), row("(a) x (b) y", "1"), {"prompt": "no answer"}]
    inp.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "out.jsonl"
    assert run_cli(["--input", str(inp), "--output", str(out), "--on-bad-row", "skip"]) == 0
    printed = capsys.readouterr().out
    assert f"{inp}: 3 rows, 1 bad row skipped" in printed and f"wrote 1 row to {out}" in printed
    assert [json.loads(x) for x in out.read_text().splitlines()] == [row("Compute 3+4.", "7")]
    rep = json.loads((tmp_path / "out.jsonl.report.json").read_text())
    assert [s["name"] for s in rep["steps"]] == ["choice_to_short", "multi_question", "short_answer", "long_answer"]
    assert rep["validation"]["n_skipped"] == 1 and (rep["n_in"], rep["n_out"]) == (2, 1)


def test_cli_output_given_with_a_trailing_slash_puts_the_report_beside_it(tmp_path):
    inp = tmp_path / "in.jsonl"
    inp.write_text(json.dumps(row("Compute 3+4.", "\\boxed{7}")) + "\n")
    assert run_cli(["--input", str(inp), "--output", f"{tmp_path / 'out.jsonl'}/"]) == 0  # a shell's completion
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl", "out.jsonl", "out.jsonl.report.json"]
    assert json.loads((tmp_path / "out.jsonl.report.json").read_text())["n_out"] == 1


def test_cli_parquet_in_parquet_out(tmp_path):
    import pyarrow as pa

    inp = tmp_path / "in.parquet"
    pq.write_table(pa.Table.from_pylist(make_rows(3, seed=1)), inp)
    out = tmp_path / "clean.parquet"
    assert run_cli(["--input", str(inp), "--output", str(out), "--steps", "short_answer,long_answer"]) == 0
    assert pq.read_table(out).to_pylist() == make_rows(3, seed=1)  # chain rows are already clean
    assert (tmp_path / "clean.parquet.report.json").exists()


@pytest.mark.parametrize("engine", [None, "torch"])  # None: the default (hf); any registry engine can sample
def test_cli_model_step_end_to_end(tmp_path, engine):
    from ulorl.models import build_tiny_model

    model = build_tiny_model(tmp_path / "tiny")
    inp = tmp_path / "in.jsonl"
    inp.write_text("".join(json.dumps(r) + "\n" for r in make_rows(2, seed=5)))
    out = tmp_path / "out.jsonl"
    argv = ["--input", str(inp), "--output", str(out), "--steps", "too_easy", "--model", str(model),
            "--k", "2", "--max-new-tokens", "4"] + (["--engine", engine] if engine else [])
    assert run_cli(argv) == 0  # default scorer: the reward package's RewardManager
    assert [json.loads(x) for x in out.read_text().splitlines()] == make_rows(2, seed=5)
    step = json.loads((tmp_path / "out.jsonl.report.json").read_text())["steps"][0]
    assert (step["name"], step["n_in"], step["n_removed"]) == ("too_easy", 2, 0)  # a random model gets nothing right
