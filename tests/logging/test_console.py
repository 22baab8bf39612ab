"""ConsoleLogger: aligned rows every `table_every` steps, eval results on their own line."""

from __future__ import annotations

import pytest

from ulorl.logging import ConsoleLogger
from ulorl.logging.console import format_value


def make(table_every: int = 3, **kw) -> tuple[ConsoleLogger, list[str]]:
    out: list[str] = []
    return ConsoleLogger(table_every=table_every, write=out.append, **kw), out


def test_rows_on_first_step_and_every_table_every_steps():
    lg, out = make(table_every=3)
    for s in range(1, 8):
        lg.log({"actor/entropy": 0.5, "critic/score/mean": 0.25}, step=s)
    rows = [line.split()[0] for line in out]
    assert rows == ["step", "1", "3", "6"]  # header once, then steps 1, 3, 6


def test_table_is_aligned_and_shows_missing_as_dash():
    lg, out = make(table_every=1, columns=[("actor/entropy", "entropy"), ("timing_s/step", "step_s")])
    lg.log({"actor/entropy": 0.123456, "timing_s/step": 12.5}, step=1)
    lg.log({"actor/entropy": float("nan")}, step=2)
    header, r1, r2 = out
    assert header.split() == ["step", "entropy", "step_s"]
    assert r1.split() == ["1", "0.1235", "12.5"]
    assert r2.split() == ["2", "nan", "-"]
    assert len({len(header), len(r1), len(r2)}) == 1  # right-aligned to the same widths


def test_header_repeats_and_widens_when_a_value_outgrows_its_column():
    lg, out = make(table_every=1, columns=[("x", "x")], header_every=2)
    for s in range(1, 4):
        lg.log({"x": 1.0}, step=s)
    assert [line.split()[0] for line in out] == ["step", "1", "2", "step", "3"]
    out.clear()
    lg.log({"x": -0.000123456}, step=4)  # "-0.0001235" is wider than 7 characters
    assert out[0].split() == ["step", "x"] and len(out[0]) == len(out[1])


def test_eval_metrics_are_printed_whenever_logged():
    lg, out = make(table_every=10)
    lg.log({"actor/entropy": 0.5}, step=1)
    out.clear()
    lg.log({"actor/entropy": 0.5, "eval/avg@k": 0.375, "eval/pass@1": 0.5}, step=7)
    assert out == ["[eval] step 7: eval/avg@k=0.375  eval/pass@1=0.5"]


def test_format_value():
    assert format_value(None) == "-"
    assert format_value(3) == "3"
    assert format_value(2.0) == "2"
    assert format_value(12345.67) == "12346"
    assert format_value(0.000123456) == "0.0001235"
    assert format_value(float("inf")) == "inf"


def test_invalid_table_every():
    with pytest.raises(ValueError, match="table_every must be >= 1"):
        ConsoleLogger(table_every=0)


def test_default_table_every_gives_short_runs_a_row_a_step():
    from ulorl.config.logging import default_table_every

    assert [default_table_every(s) for s in (1, 8, 19, 20, 55, 100, 300)] == [1, 1, 1, 2, 5, 10, 10]


def test_table_every_must_be_positive():
    from ulorl.config import ConfigError, load_run_config

    assert load_run_config(None, ["logging.table_every=3"]).logging.table_every == 3
    with pytest.raises(ConfigError, match=r"logging.table_every=0 must be > 0"):
        load_run_config(None, ["logging.table_every=0"])


def test_a_three_step_run_prints_a_row_every_step(tmp_path, tiny_model_dir, capsys):
    """With table_every unset, a 3-step run's console table has rows for steps 1, 2 and 3 (every 10 before)."""
    from tests.run.test_hostile_cases import QUICK, tiny_run

    from ulorl.config import load_run_config
    from ulorl.run.loop import train

    overrides = [o for o in tiny_run(tiny_model_dir, "train.steps=3") if o not in QUICK]
    train(load_run_config(None, ["model.warm_start=none", "data.eval=null", "logging.progress=false",
                                 "logging.loggers=[console]", *overrides]), tmp_path / "run")
    rows = [line.split()[0] for line in capsys.readouterr().out.splitlines() if line.strip()[:1].isdigit()]
    assert rows == ["1", "2", "3"]
