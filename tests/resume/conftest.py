"""Fixtures of the resume tests: a tiny model that often says EOS, built once per session."""

from __future__ import annotations

import pytest
import torch
from resume_helpers import make_eos_model


@pytest.fixture(scope="session")
def eos_model(tmp_path_factory):
    return make_eos_model(tmp_path_factory.mktemp("eos_model") / "model")


@pytest.fixture(autouse=True)
def one_thread():
    """Single-threaded torch: every run here uses the same reduction order (bit-exact comparisons), and
    threads fighting over two shared cores made these tests several times slower."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)
