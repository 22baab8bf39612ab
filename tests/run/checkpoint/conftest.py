"""Fixtures of the resume tests: a tiny model that often says EOS, built once per session."""

from __future__ import annotations

import pytest
import torch
from tests.run.checkpoint.resume_helpers import make_eos_model


@pytest.fixture(scope="session")
def eos_model(tmp_path_factory):
    return make_eos_model(tmp_path_factory.mktemp("eos_model") / "model")


@pytest.fixture(scope="module")
def three_steps(eos_model, tmp_path_factory):
    """A 3-step run with checkpoints step_000002 and step_000003 (keep=2); tests copy it (`copy_run`) before
    changing anything."""
    from tests.run.checkpoint.resume_helpers import config

    from ulorl.run.loop import train

    old = torch.get_num_threads()
    torch.set_num_threads(1)
    run = tmp_path_factory.mktemp("three") / "run"
    train(config(eos_model, "train.steps=3"), run)
    torch.set_num_threads(old)
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["latest", "step_000002", "step_000003"]
    return run


@pytest.fixture(autouse=True)
def one_thread():
    """Single-threaded torch: every run here uses the same reduction order (bit-exact comparisons), and
    threads fighting over two shared cores made these tests several times slower."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)
