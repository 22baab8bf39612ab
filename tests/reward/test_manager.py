"""RewardManager end to end with worker processes: rule and user reward functions, metrics."""

import textwrap

import pytest

from ulorl.reward import RewardManager, apply_overlong_policy
from ulorl.config import RewardConfig


def test_rule_manager_scores_and_reports_metrics():
    cfg = RewardConfig(fn="rule", timeout_s=2.0, num_workers=1, extractors={"synthetic": "builtin"})
    with RewardManager(cfg) as rm:
        rewards = rm.score(
            [r"\boxed{\frac{1}{2}}", r"\boxed{5^{5^{5^{5^5}}}}", r"\boxed{9} ... answer 7", "Answer: 3"],
            ["0.5", "5", "7", "4"],
            ["math", "math", "synthetic", "math"],
        )
        m = rm.metrics()
        again = rm.metrics()
    # the configured overlong policy ("zero") through the one entry point, the pure function
    r, keep = apply_overlong_policy(cfg.overlong, [1.0, 1.0], [10, 16], [False, True], max_len=16,
                                    buffer_len=cfg.overlong_buffer)
    # 1/2 == 0.5; the tower times out; "synthetic" uses the builtin extractor -> "7"; 3 != 4
    assert rewards == [1.0, 0.0, 1.0, 0.0]
    assert m["reward/items"] == 4 and m["reward/timeouts"] == 1 and m["reward/errors"] == 0
    assert m["timing_s/reward_score"] >= 2.0  # includes the 2 s deadline of the tower
    assert {"reward/judge_failures", "reward/judge_timeouts", "reward/too_long"} <= set(m)
    assert all(v == 0 for v in again.values())  # metrics() reports deltas since the last call
    assert r.tolist() == [1.0, 0.0] and keep.tolist() == [True, True]


def test_user_function_float_and_dict(tmp_path, monkeypatch):
    (tmp_path / "ulorl_test_mgr_reward.py").write_text(
        textwrap.dedent(
            """
            def as_float(data_source, solution_str, ground_truth, extra_info=None):
                return 1.0 if ground_truth in solution_str else 0.0

            def as_dict(data_source, solution_str, ground_truth, extra_info=None):
                return {"score": len(solution_str) / 10, "data_source": data_source}
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with RewardManager(RewardConfig(fn="ulorl_test_mgr_reward:as_float", num_workers=1)) as rm:
        assert rm.score(["the result is 42", "no"], ["42", "42"], ["a", "b"]) == [1.0, 0.0]
    with RewardManager(RewardConfig(fn="ulorl_test_mgr_reward:as_dict", num_workers=1)) as rm:
        assert rm.score(["12345", "1"], ["x", "x"], ["a", "b"]) == [0.5, 0.1]


def test_unknown_user_function_fails_at_construction():
    with pytest.raises(ValueError, match="cannot load user reward function"):
        RewardManager(RewardConfig(fn="ulorl.reward.rule:no_such_function"))
