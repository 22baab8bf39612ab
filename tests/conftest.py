"""Shared fixtures: a tiny model built in code (no downloads), quiet transformers, run configs."""

from __future__ import annotations

import hashlib
import os

# Triton's interpreter for the triton decode kernel's tests (tests/rollout/engines/test_table_decode.py): the
# variable must be set before triton is first imported (transformers imports it when it is installed), or
# triton's own library functions are compiled-mode ones that an interpreted kernel cannot call. No other test
# runs a Triton kernel; on CPU torch's compiler emits C++, not Triton.
os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# One intra-op thread: the tiny model gains nothing from more, and OpenMP spin-waiting under a busy
# 2-core machine (reward worker processes, other tests) slows a multi-threaded run several-fold.
torch.set_num_threads(1)


def pytest_xdist_auto_num_workers(config):
    """`-n auto` (pyproject's addopts): one worker per core this process may use, at most 4. Each test runs on one
    thread, so two workers fill a 2-core CI machine; more than 4 would mostly add start-up (each worker imports
    torch and builds its own tiny models) and memory."""
    from ulorl.config.machine import usable_cpus

    return min(4, usable_cpus())


@pytest.fixture(scope="session", autouse=True)
def _isolated_cache(tmp_path_factory):
    """The built-in model is created in a per-session cache, never in the user's home."""
    old = os.environ.get("ULORL_CACHE")
    os.environ["ULORL_CACHE"] = str(tmp_path_factory.mktemp("ulorl_cache"))
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    yield
    if old is None:
        os.environ.pop("ULORL_CACHE", None)
    else:
        os.environ["ULORL_CACHE"] = old


@pytest.fixture(autouse=True)
def _numerics_pins_unchanged():
    """A test that leaves `train.cpu_numerics`' variables set (MKL's branch, torch's kernel family) changes the
    floats of every engine or learner child spawned after it in this process, as children inherit the environment
    while the parent keeps what it chose at its first operation: such a test fails here, and the values it changed
    are put back."""
    from ulorl.config.train import CPU_NUMERICS

    keys = CPU_NUMERICS["portable"]
    before = {key: os.environ.get(key) for key in keys}
    yield
    changed = {key: os.environ.get(key) for key in keys if os.environ.get(key) != before[key]}
    for key in changed:
        if before[key] is None:
            del os.environ[key]
        else:
            os.environ[key] = before[key]
    if changed:
        pytest.fail(f"the test left {changed} in the environment (it was {before}): use monkeypatch")


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    from ulorl.models import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


class FakeReward:
    """Deterministic stand-in for RewardManager: reward = parity of a hash of the response text."""

    def __init__(self) -> None:
        self.calls = 0

    def score(self, responses, ground_truths, data_sources, extra_infos=None, prompts=None):
        self.calls += 1
        return [float(hashlib.md5(r.encode()).digest()[0] % 2) for r in responses]

    def score_detailed(self, responses, *args, **kwargs):  # every reward computed
        from ulorl.reward import RewardScores

        return RewardScores(self.score(responses, *args, **kwargs), [None] * len(responses))

    def metrics(self):
        return {}

    def close(self):
        pass


@pytest.fixture
def fake_reward():
    return FakeReward()


@pytest.fixture(scope="session")
def eos_model_dir(tmp_path_factory):
    """The resume tests' tiny model that often says EOS (answers of varied lengths, so rewards differ within a
    group and every update moves the weights): `tests.run.checkpoint.resume_helpers.make_eos_model`."""
    from tests.run.checkpoint.resume_helpers import make_eos_model

    return make_eos_model(tmp_path_factory.mktemp("eos_model") / "model")
