"""TensorBoardLogger: scalars readable back from the event files; clear error without tensorboard."""

from __future__ import annotations

import sys

import pytest

from ulorl.logging import TensorBoardLogger, make_loggers


def test_missing_tensorboard_gives_install_hint(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # as if not installed
    with pytest.raises(ImportError, match=r"pip install 'ulorl\[tensorboard\]'"):
        TensorBoardLogger(tmp_path / "tb")


def test_scalars_are_in_the_event_files(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    loggers = make_loggers(["tensorboard"], tmp_path, config={"algo": {"is_mode": "pois"}})
    loggers.log({"actor/entropy": 0.5, "rollout/unfinished_pool": 3}, step=1)
    loggers.log({"actor/entropy": 0.25, "rollout/unfinished_pool": 5}, step=2)
    loggers.close()
    acc = EventAccumulator(str(tmp_path / "tensorboard"))
    acc.Reload()
    assert {"actor/entropy", "rollout/unfinished_pool"} <= set(acc.Tags()["scalars"])
    assert [(e.step, e.value) for e in acc.Scalars("actor/entropy")] == [(1, 0.5), (2, 0.25)]
    assert [(e.step, e.value) for e in acc.Scalars("rollout/unfinished_pool")] == [(1, 3.0), (2, 5.0)]
    assert (tmp_path / "metrics.jsonl").exists()  # jsonl is always on
