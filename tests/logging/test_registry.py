"""Logger registry, make_loggers and MultiLogger."""

from __future__ import annotations

import json

import pytest

from ulorl.logging import (ConsoleLogger, JsonlLogger, Logger, LoggerName, MultiLogger, make_loggers,
                           parse_logger_name)


def test_unknown_logger_lists_valid_names(tmp_path):
    with pytest.raises(ValueError, match="unknown logger 'tensorbord'; valid loggers: console, jsonl, "
                                         "tensorboard, wandb"):
        make_loggers(["console", "tensorbord"], tmp_path / "run")
    assert not (tmp_path / "run").exists()  # validated before anything was created


def test_parse_logger_name():
    assert parse_logger_name("wandb") is LoggerName.WANDB
    assert parse_logger_name(LoggerName.CONSOLE) is LoggerName.CONSOLE


def test_jsonl_always_on_and_duplicates_ignored(tmp_path):
    loggers = make_loggers(["console", "console"], tmp_path, table_every=5)
    kinds = [type(lg) for lg in loggers.loggers]
    assert kinds == [JsonlLogger, ConsoleLogger]
    assert loggers.loggers[1].table_every == 5
    loggers.close()
    with make_loggers(["jsonl"], tmp_path, resume_step=0) as loggers:
        assert [type(lg) for lg in loggers.loggers] == [JsonlLogger]


def test_a_string_instead_of_a_list_is_rejected(tmp_path):
    with pytest.raises(TypeError, match="list of logger names"):
        make_loggers("console", tmp_path)


def test_make_loggers_resume_truncates_metrics(tmp_path):
    with make_loggers([], tmp_path) as lg:
        for s in (1, 2, 3):
            lg.log({"x": s}, s)
    with make_loggers([], tmp_path, resume_step=2) as lg:
        lg.log({"x": 30}, 3)
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert rows == [{"step": 1, "x": 1}, {"step": 2, "x": 2}, {"step": 3, "x": 30}]


class Recorder:
    def __init__(self, fail_close: bool = False):
        self.calls: list = []
        self.fail_close = fail_close

    def log(self, metrics, step):
        self.calls.append((metrics, step))

    def close(self):
        self.calls.append("close")
        if self.fail_close:
            raise OSError("disk gone")


def test_multilogger_fans_out_and_closes_all_even_on_error():
    a, b, c = Recorder(), Recorder(fail_close=True), Recorder()
    assert all(isinstance(x, Logger) for x in (a, b, c))
    multi = MultiLogger([a, b, c])
    multi.log({"x": 1.0}, 3)
    with pytest.raises(OSError, match="disk gone"):
        multi.close()
    assert a.calls == b.calls == c.calls == [({"x": 1.0}, 3), "close"]
