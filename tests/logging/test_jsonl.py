"""JsonlLogger: one parsable JSON line per step, NaN as null, resume truncation."""

from __future__ import annotations

import json
import logging
import math

import numpy as np
import pytest
import torch

from ulorl.logging import JsonlLogger, read_metrics


def lines(path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_one_json_line_per_step_flushed_immediately(tmp_path):
    path = tmp_path / "metrics.jsonl"
    lg = JsonlLogger(path, resume_step=None)
    lg.log({"actor/entropy": 0.5, "rollout/unfinished_pool": 3}, step=1)
    # flushed: visible before close
    assert lines(path) == [{"step": 1, "actor/entropy": 0.5, "rollout/unfinished_pool": 3}]
    lg.log({"actor/entropy": 0.25}, step=2)
    lg.close()
    lg.close()  # idempotent
    assert [r["step"] for r in lines(path)] == [1, 2]


def test_non_finite_values_are_written_as_null(tmp_path):
    path = tmp_path / "metrics.jsonl"
    with_nan = {"a": float("nan"), "b": float("inf"), "c": -math.inf, "d": 1.5}
    lg = JsonlLogger(path)
    lg.log(with_nan, step=1)
    lg.close()
    text = path.read_text()
    assert "NaN" not in text and "Infinity" not in text
    # strict parse: reject the non-standard NaN/Infinity tokens
    row = json.loads(text, parse_constant=lambda c: pytest.fail(f"non-JSON constant {c}"))
    assert row == {"step": 1, "a": None, "b": None, "c": None, "d": 1.5}


def test_numpy_tensor_and_bool_values_are_converted(tmp_path):
    path = tmp_path / "metrics.jsonl"
    lg = JsonlLogger(path)
    lg.log({"np": np.float32(0.5), "t": torch.tensor(2.0), "flag": True, "n": np.int64(7)}, step=3)
    lg.close()
    assert lines(path) == [{"step": 3, "np": 0.5, "t": 2.0, "flag": 1, "n": 7}]


def test_bad_values_and_steps_raise_clear_errors(tmp_path):
    lg = JsonlLogger(tmp_path / "m.jsonl")
    with pytest.raises(TypeError, match="metric 'x' must be a number"):
        lg.log({"x": "high"}, step=1)
    with pytest.raises(TypeError, match="metric 'v' must be a scalar"):
        lg.log({"v": torch.ones(3)}, step=1)
    with pytest.raises(TypeError, match="step must be a non-negative int"):
        lg.log({"x": 1.0}, step=-1)
    lg.close()
    with pytest.raises(RuntimeError, match="closed"):
        lg.log({"x": 1.0}, step=2)


def test_resume_drops_lines_after_the_resumed_step(tmp_path):
    path = tmp_path / "metrics.jsonl"
    lg = JsonlLogger(path)
    for s in range(1, 6):
        lg.log({"x": float(s)}, step=s)
    lg.close()
    # crash after step 5, checkpoint of step 3: steps 4 and 5 will be re-run
    lg = JsonlLogger(path, resume_step=3)
    assert [r["step"] for r in lines(path)] == [1, 2, 3]
    lg.log({"x": 40.0}, step=4)
    lg.close()
    assert [(r["step"], r["x"]) for r in lines(path)] == [(1, 1.0), (2, 2.0), (3, 3.0), (4, 40.0)]


def test_resume_drops_a_line_cut_short_by_a_crash(tmp_path, caplog):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1, "x": 1}\n{"step": 2, "x": 2}\n{"step": 3, "x"')
    with caplog.at_level(logging.WARNING):
        JsonlLogger(path, resume_step=5).close()
    assert [r["step"] for r in lines(path)] == [1, 2]
    assert f"{path}:3" in caplog.text


def test_resume_without_existing_file_starts_empty(tmp_path):
    path = tmp_path / "sub" / "metrics.jsonl"
    JsonlLogger(path, resume_step=7).close()
    assert path.read_text() == ""


def test_fresh_run_keeps_old_file_as_backup(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1, "x": 1}\n')
    JsonlLogger(path, resume_step=None).close()
    assert path.read_text() == ""
    assert (tmp_path / "metrics.jsonl.bak").read_text() == '{"step": 1, "x": 1}\n'


def test_read_metrics_sorts_dedupes_and_skips_bad_lines(tmp_path, caplog):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 2, "x": 2}\nnot json\n{"x": 5}\n\n{"step": 1, "x": null}\n{"step": 2, "x": 3}\n')
    with caplog.at_level(logging.WARNING):
        rows = read_metrics(path)
    assert rows == [{"step": 1, "x": None}, {"step": 2, "x": 3}]  # last occurrence of step 2 wins
    assert f"{path}:2" in caplog.text and f"{path}:3" in caplog.text
    # a file that is no metrics file: three lines warned, the rest counted in one
    other = tmp_path / "script.py"
    other.write_text("".join(f"line {i}\n" for i in range(50)))
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert read_metrics(other) == []
    assert [r.getMessage() for r in caplog.records] == [
        f"{other}:1: skipping unparsable line (Expecting value)", f"{other}:2: skipping unparsable line (Expecting "
        f"value)", f"{other}:3: skipping unparsable line (Expecting value)", f"{other}: 47 more bad lines skipped (50 "
        f"in all)"]


def strict_loads(text: str):
    """`json.loads` refusing NaN and +-inf, as jq and JavaScript do."""
    def refuse(name):
        raise ValueError(f"not JSON: {name}")

    return json.loads(text, parse_constant=refuse)


def test_the_runs_json_reports_write_non_finite_floats_as_null(tmp_path):
    from ulorl.evaluation.evaluator import EvalResult
    from ulorl.logging.base import finite_or_null, json_text
    from ulorl.run.session import write_history

    nan, inf = float("nan"), float("inf")
    value = {"a": [1.5, nan, (inf, -inf, 2)], "b": {"c": nan, "d": "NaN", "e": None, "f": True, "g": 3}}
    expected = {"a": [1.5, None, [None, None, 2]], "b": {"c": None, "d": "NaN", "e": None, "f": True, "g": 3}}
    assert finite_or_null(value) == expected
    assert strict_loads(json_text(value, indent=1)) == expected
    with pytest.raises(ValueError, match="not JSON: NaN"):  # what Python's default wrote
        strict_loads(json.dumps(value))
    write_history(tmp_path, {"entropy": [0.5, nan], "eval": {"after": {"avg@k": inf}}})  # history.json
    assert strict_loads((tmp_path / "history.json").read_text()) == {"entropy": [0.5, None],
                                                                      "eval": {"after": {"avg@k": None}}}
    result = EvalResult("set", {"avg@k": nan, "pass@1": 0.25})  # results.json's per-set part
    assert strict_loads(result.to_json())["summary"] == {"avg@k": None, "pass@1": 0.25}
