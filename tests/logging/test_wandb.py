"""WandbLogger: offline by default, logs with the step; clear error without wandb.

The real wandb is not required: a stand-in module records the calls.
"""

from __future__ import annotations

import sys
import types

import pytest

from ulorl.logging import WandbLogger, make_loggers


class FakeRun:
    def __init__(self, **kwargs):
        self.init_kwargs = kwargs
        self.logged: list[tuple[dict, int]] = []
        self.finished = 0

    def log(self, metrics, step):
        self.logged.append((metrics, step))

    def finish(self):
        self.finished += 1


@pytest.fixture
def fake_wandb(monkeypatch):
    mod = types.ModuleType("wandb")
    mod.runs = []

    def init(**kwargs):
        mod.runs.append(FakeRun(**kwargs))
        return mod.runs[-1]

    mod.init = init
    monkeypatch.setitem(sys.modules, "wandb", mod)
    return mod


def test_offline_run_logs_metrics_with_step(tmp_path, fake_wandb):
    run_dir = tmp_path / "my_run"
    loggers = make_loggers(["wandb"], run_dir, project="proj", config={"a": 1})
    loggers.log({"actor/entropy": 0.5, "actor/skipped": True}, step=4)
    loggers.close()
    (run,) = fake_wandb.runs
    assert run.init_kwargs == {"project": "proj", "dir": str(run_dir), "mode": "offline",
                               "name": "my_run", "config": {"a": 1}}
    assert run.logged == [({"actor/entropy": 0.5, "actor/skipped": 1}, 4)]
    assert run.finished == 1


def test_missing_wandb_gives_install_hint(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)  # as if not installed
    with pytest.raises(ImportError, match=r"pip install 'ulorl\[wandb\]'"):
        WandbLogger(tmp_path)


def test_real_wandb_offline(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_SILENT", "true")
    lg = WandbLogger(tmp_path, project="ulorl-test")
    lg.log({"actor/entropy": 0.5}, step=1)
    lg.close()
    assert (tmp_path / "wandb").is_dir()
