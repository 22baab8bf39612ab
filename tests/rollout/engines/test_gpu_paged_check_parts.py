"""`benchmarks/gpu_paged_check.py`'s diagnostics: a part that fails on the lent machine's torch or device is recorded
as a finding, and the parts after it still run (a loan is too short to lose the rest of a check to one error)."""

from __future__ import annotations

import contextlib

import torch

from tests.rollout.engines.benchmark_modules import benchmark_module


def test_a_failing_diagnostic_is_recorded_and_the_next_parts_run(monkeypatch):
    check = benchmark_module("gpu_paged_check")
    ran, parts = [], []

    def fails(what):
        def call(*args, **kwargs):
            ran.append(what)
            raise RuntimeError(f"no {what} here")
        return call

    monkeypatch.setattr(check, "sampler_case", fails("sampler"))
    monkeypatch.setattr(check, "host_step_ms", lambda *a: ran.append("host_step"))  # after the sampler: skipped
    monkeypatch.setattr(check, "norm_paths", lambda *a: ran.append("norm") or {
        "module_ms": 1.0, "engine_ms": 0.5, "max_diff_bf16_steps": 0.0})
    monkeypatch.setattr(check, "prefill_paths", fails("prefill"))

    @contextlib.contextmanager
    def part(name):
        parts.append(name)
        yield

    res = {"skipped": []}
    check.diagnostics(res, None, torch.device("cpu"), check.QUICK, True, lambda: 1.0, part)
    assert ran == ["sampler", "norm", "prefill"] and parts == ["sampler / host_step", "norm", "prefill"]
    assert res["skipped"] == ["sampler / host_step: RuntimeError: no sampler here",
                              "prefill: RuntimeError: no prefill here"]
    assert res["norm"]["engine_ms"] == 0.5 and "sampler" not in res and "prefill" not in res


def test_error_text_is_the_type_and_the_start_of_the_message():
    check = benchmark_module("gpu_paged_check")
    assert check.error_text(ValueError("x" * 500)) == "ValueError: " + "x" * 300
    assert check.error_text(KeyError("k"), 400) == "KeyError: 'k'"
