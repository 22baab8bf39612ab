"""Fixtures of the run tests: the resume tests' tiny model that often says EOS (answers of varied lengths, so
rewards differ within a group and every update moves the weights)."""

from __future__ import annotations

import pytest

from tests.run.checkpoint.resume_helpers import make_eos_model


@pytest.fixture(scope="session")
def eos_model_dir(tmp_path_factory):
    return make_eos_model(tmp_path_factory.mktemp("eos_model") / "model")
