"""Issue 25, case 2: an item whose reward function raised (or whose user function timed out) is never trained.

Before, such items were counted in `reward/errors` but trained with reward 0 and status `trained`. Now the
group of such a sample is dropped when it completes: `samples.jsonl` marks its samples `dropped` with reason
`reward_failed` (and the failed sample with its `reward_failure`), `rollout/reward_failed_groups` and the
summary count the groups. The function below raises on a known subset: responses whose MD5's first byte is
divisible by 3, a rule the test re-applies to the logged text.
"""

from __future__ import annotations

import hashlib
import json
import textwrap

from ulorl.api import Trainer, make_config
from ulorl.cli import main
from ulorl.reward import RewardManager
from ulorl.config import RewardConfig

TINY = {"model.warm_start": "none", "data.train_size": 30, "data.eval": None, "rollout.max_response_len": 8,
        "rollout.num_segments": 2, "rollout.group_size": 2, "rollout.decode_batch": 8, "train.train_groups": 2,
        "algo.dynamic_sampling": False, "logging.progress": False, "logging.loggers": ["jsonl"],
        "checkpoint.every": 0, "reward.num_workers": 1, "reward.max_error_frac": 1.0}


def raises_on(text: str) -> bool:
    return hashlib.md5(text.encode()).digest()[0] % 3 == 0


def fussy(data_source, solution_str, ground_truth, extra_info=None):
    if raises_on(solution_str):
        raise ValueError("cannot score this one")
    return float(len(solution_str) % 2)


def test_a_group_with_a_raising_reward_is_dropped_not_trained(tmp_path, capsys):
    run = tmp_path / "run"
    rows = [{"prompt": f"add {i} {i}", "answer": str(2 * i)} for i in range(30)]
    summary = Trainer(make_config(None, {**TINY, "train.steps": 4}), reward_funcs=fussy, train_dataset=rows,
                      eval_dataset=False, output_dir=run).train()
    samples = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
    by_group: dict[str, list[dict]] = {}
    for s in samples:
        by_group.setdefault(s["group_id"], []).append(s)
    failed_groups = {g for g, members in by_group.items() if any(raises_on(m["response"]) for m in members)}
    assert failed_groups, "the subset is empty: pick another rule"  # the test would prove nothing
    for s in samples:
        if s["group_id"] in failed_groups:  # never trained, dropped for the failure
            assert (s["status"], s["reason"]) == ("dropped", "reward_failed"), s
            if raises_on(s["response"]):
                assert s["reward_failure"].startswith("fussy: error: ValueError: cannot score this one"), s
            else:
                assert "reward_failure" not in s
        else:  # every other group trained with the function's own reward (0 when truncated: reward.overlong=zero)
            expected = 0.0 if s["stop_reason"] == "truncated" else float(len(s["response"]) % 2)
            assert s["status"] == "trained" and s["reward"] == expected, s
    assert summary["steps"] == 4 and summary["trained_samples"] == 4 * 2 * 2
    assert summary["reward_failed_groups"] == len(failed_groups)
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert sum(m["rollout/reward_failed_groups"] for m in metrics) == len(failed_groups)
    assert sum(m["rewards/fussy/errors"] for m in metrics) == sum(raises_on(s["response"]) for s in samples)
    # `ulorl show` says which samples have no reward, and why, instead of a reward of 0
    failed = next(s for s in samples if "reward_failure" in s)
    assert main(["show", str(run), "--step", str(failed["step"]), "--limit", "0", "--chars", "0"]) == 0
    shown = capsys.readouterr().out
    assert f"  {failed['sample_id']}  reward none (fussy: error: ValueError: cannot score this one" in shown
    assert "dropped (reward_failed)  rewards [" in shown and "none" in shown.split("rewards [", 1)[1].split("]")[0]


def test_a_user_function_past_its_deadline_has_no_reward(tmp_path, monkeypatch):
    (tmp_path / "ulorl_test_past_deadline_reward.py").write_text(textwrap.dedent("""
        import time
        def score(data_source, solution_str, ground_truth, extra_info=None):
            if solution_str == "hang":
                time.sleep(1000)
            return float(solution_str == ground_truth)
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    cfg = RewardConfig(fn="ulorl_test_past_deadline_reward:score", timeout_s=1.0, num_workers=1, max_error_frac=1.0)
    with RewardManager(cfg) as rm:
        out = rm.score_detailed(["a", "hang", "b"], ["a", "a", "a"], ["s"] * 3)
    assert out.rewards == [1.0, 0.0, 0.0]
    assert out.uncomputed[0] is None and out.uncomputed[2] is None  # "b" was scored: a real 0
    assert out.uncomputed[1] == "score: timeout: no result within 1.0s"  # "<function name>: <why>"


def test_a_builtin_verifier_timeout_is_its_verdict():
    # math-verify cannot settle 5^(5^(5^(5^5))) in time: the built-in scores such an answer 0, as computed
    with RewardManager(RewardConfig(fn="rule", timeout_s=1.0, num_workers=1)) as rm:
        out = rm.score_detailed([r"\boxed{5^{5^{5^{5^5}}}}", r"\boxed{2}"], ["5", "2"], ["s", "s"])
    assert out.rewards == [0.0, 1.0] and out.uncomputed == [None, None]
