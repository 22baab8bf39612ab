"""pass@k against hand-computed values, and the length statistics."""

from __future__ import annotations

import json
from math import comb

import pytest

from ulorl.evaluation import length_stats, paired_difference, pass_at_k
from ulorl.evaluation.metrics import z_text
from ulorl.config import EvalConfig


@pytest.mark.parametrize("n, c, k, expected", [
    (4, 1, 2, 0.5),          # 1 - C(3,2)/C(4,2) = 1 - 3/6
    (4, 1, 1, 0.25),         # pass@1 = c/n
    (4, 0, 2, 0.0),          # no correct sample
    (4, 3, 2, 1.0),          # n - c = 1 < k: every pair holds a correct one
    (5, 2, 3, 0.9),          # 1 - C(3,3)/C(5,3) = 1 - 1/10
    (32, 4, 8, 1 - comb(28, 8) / comb(32, 8)),  # = 1 - 3108105/10518300 ~ 0.7045
])
def test_pass_at_k_hand_computed(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


def test_pass_at_k_stable_for_large_n():
    # C(1000, 500) overflows floats; the product form does not: pass@1 is still c/n
    assert pass_at_k(1000, 7, 1) == pytest.approx(0.007)
    assert 0.0 < pass_at_k(1000, 1, 500) == pytest.approx(0.5)


@pytest.mark.parametrize("n, c, k", [(4, 5, 1), (4, 1, 5), (4, 1, 0)])
def test_pass_at_k_rejects_bad_arguments(n, c, k):
    with pytest.raises(ValueError):
        pass_at_k(n, c, k)


def test_length_stats():
    s = length_stats([1, 2, 3, 4, 10])
    # mean = 20/5 = 4; median = 3; p90 by linear interpolation: 4 + 0.6 * (10 - 4) = 7.6
    assert s == pytest.approx({"response_length/mean": 4.0, "response_length/p50": 3.0,
                               "response_length/p90": 7.6, "response_length/max": 10.0})
    assert length_stats([])["response_length/mean"] == 0.0


def test_eval_config_defaults_and_validation():
    cfg = EvalConfig()
    assert (cfg.k, cfg.temperature, cfg.top_p, cfg.top_k) == (32, 0.85, 0.95, 20)  # paper's protocol
    assert cfg.reported_pass_k() == [1, 8, 32]
    assert EvalConfig(k=4).reported_pass_k() == [1, 4]
    with pytest.raises(ValueError, match="eval.top_k"):
        EvalConfig(top_k=0)
    with pytest.raises(ValueError, match="eval.k must be >= 1"):
        EvalConfig(k=0)


def test_paired_difference_by_hand():
    # k=4; per-problem differences d = (+2/4, 0, -1/4, +3/4) -> mean 0.25
    p = paired_difference([1, 2, 4, 0], [3, 2, 3, 3], k=4)
    d = [0.5, 0.0, -0.25, 0.75]
    mean = sum(d) / 4
    sd = (sum((x - mean) ** 2 for x in d) / 3) ** 0.5
    assert p["delta"] == pytest.approx(0.25)
    assert p["se"] == pytest.approx(sd / 2)
    assert p["z"] == pytest.approx(0.25 / (sd / 2))
    assert (p["better"], p["worse"], p["same"], p["num_problems"]) == (2, 1, 1, 4)


def test_paired_difference_without_spread_has_no_z():
    # every problem changed by the same amount (here none): se = 0, z undefined, and the dict is strict JSON
    p = paired_difference([1, 2, 4], [1, 2, 4], k=4)
    assert (p["delta"], p["se"], p["z"], p["same"]) == (0.0, 0.0, None, 3)
    assert json.loads(json.dumps(p, allow_nan=False))["z"] is None
    assert paired_difference([0, 1], [2, 3], k=4)["z"] is None  # both +2/4
    assert (z_text(None), z_text(2.345), z_text(2.345, 2)) == ("undefined", "2.3", "2.35")


def test_paired_difference_rejects_mismatched_lists():
    with pytest.raises(ValueError, match="3 problems before but 2 after"):
        paired_difference([1, 2, 3], [1, 2], k=4)
