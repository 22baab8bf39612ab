"""The benchmark scripts' reports: `long_run_figures.accuracy_by_length`'s paired change per answer length, checked
by hand, and `benchlib`'s JSON, which is strict (NaN and +-inf as null) like the run's own reports."""

from __future__ import annotations

import json
import math

import pytest

from tests.rollout.engines.benchmark_modules import benchmark_module


def _strict(text: str):
    def refuse(name):
        raise ValueError(f"non-strict JSON constant {name}")

    return json.loads(text, parse_constant=refuse)


def test_accuracy_by_length_pairs_each_bucket_by_hand():
    """k = 4. Problems of 1 step (15 answer tokens): before 0, 2, 4 and after 2, 2, 4 correct, so the differences
    are 0.5, 0, 0: mean 1/6, sample variance ((1/3)^2 + 2 (1/6)^2) / 2 = 1/12, se sqrt(1/36) = 1/6, z 1, one better.
    Two 50-step problems (309 tokens) that did not change: se 0, so z is undefined (None), not NaN. One 200-step
    problem (1,209 tokens, also the >= 1,000 bucket): a change of 0.5 without a standard error."""
    figures = benchmark_module("long_run_figures")
    rows = figures.accuracy_by_length([1, 1, 1, 50, 50, 200],
                                      {"before": [0, 2, 4, 1, 3, 1], "after": [2, 2, 4, 1, 3, 3]}, 4)
    by = {r["answer_tokens"]: r for r in rows}
    assert list(by) == ["0-255", "256-1023", "1024-2047", ">=1000"]
    short = by["0-255"]
    assert short["problems"] == 3 and short["before"] == pytest.approx(0.5) and short["after"] == pytest.approx(2 / 3)
    assert short["change"] == pytest.approx(1 / 6) and short["se"] == pytest.approx(1 / 6)
    assert short["z"] == pytest.approx(1.0) and (short["better"], short["worse"]) == (1, 0)
    same = by["256-1023"]
    assert same["change"] == 0.0 and same["se"] == 0.0 and same["z"] is None
    for name in ("1024-2047", ">=1000"):
        assert by[name]["problems"] == 1 and by[name]["change"] == pytest.approx(0.5)
        assert by[name]["se"] is None and by[name]["z"] is None


def test_benchmark_json_is_strict(tmp_path, capsys):
    """`emit` writes the file and the stdout line with NaN and +-inf as null; finite values unchanged."""
    benchlib = benchmark_module("benchlib")
    out = tmp_path / "r.json"
    result = {"z": math.nan, "rows": [{"ms": 1.5, "ratio": math.inf}], "n": 3, "none": None}
    assert benchlib.emit(result, out) == 0
    expected = {"z": None, "rows": [{"ms": 1.5, "ratio": None}], "n": 3, "none": None}
    assert _strict(out.read_text()) == expected
    assert _strict(capsys.readouterr().out.strip().splitlines()[-1]) == expected
    assert math.isnan(result["z"])  # the caller's dict is left as it was
