"""Fixtures of the model tests: the resume tests' tiny model that often says EOS (answers of varied lengths, so
rewards differ within a group and every update moves the weights)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def eos_model_dir(tmp_path_factory):
    spec = importlib.util.spec_from_file_location("resume_helpers_for_models",
                                                  Path(__file__).parents[1] / "resume" / "resume_helpers.py")
    helpers = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(helpers)
    return helpers.make_eos_model(tmp_path_factory.mktemp("eos_model") / "model")
