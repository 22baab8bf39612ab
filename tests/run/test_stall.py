"""Stalls: a step whose groups never pass dynamic sampling ends with a report and a one-line error."""

import json
from types import SimpleNamespace

import pytest

from ulorl.cli import main
from ulorl.config import load_run_config
from ulorl.run.session import open_session
from ulorl.rollout.engines.scripted import ScriptedEngine
from ulorl.rollout.collect import NOTE_EVERY
from tests.conftest import FakeReward  # reward = parity of a hash of the text: mixed within groups
from ulorl.rollout.collect import RoundsSeen
from ulorl.run.stall import StallError, hint
from ulorl.run.loop import train_step


class ConstantReward(FakeReward):
    """The same reward for every response (so every group is uniform and dynamic sampling drops it)."""

    def __init__(self, value: float) -> None:
        super().__init__()
        self.value = value

    def score(self, responses, ground_truths, data_sources, extra_infos=None, **kwargs):
        self.calls += 1
        return [self.value] * len(responses)


def session(tmp_path, reward, overrides):
    cfg = load_run_config(None, ["model.warm_start=none", "data.eval=null", "data.train_size=50",
                                 "logging.progress=false", "logging.loggers=[jsonl]", "rollout.max_response_len=16",
                                 "rollout.num_segments=2", "rollout.group_size=2", "rollout.decode_batch=4",
                                 "train.train_groups=1", *overrides])
    s = open_session(cfg, tmp_path / "run")
    s.engine = ScriptedEngine([3, 5, 4, 6], eos_id=s.tokenizer.eos_token_id)  # short answers: groups finish
    s.rollout.engine = s.engine
    s.reward.close()
    s.reward = reward
    return s


def test_all_wrong_stalls_with_report_and_hint(tmp_path, capsys):
    s = session(tmp_path, ConstantReward(0.0), [f"train.max_stall_rounds={NOTE_EVERY + 2}"])
    try:
        with pytest.raises(StallError) as e:
            train_step(s)
    finally:
        s.close()
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"step 1: no group admitted in {NOTE_EVERY + 2} rollout rounds")
    assert "Hint: no answer was scored right" in msg
    report = json.loads((tmp_path / "run" / "stall_report.json").read_text())
    assert report["step"] == 1 and report["idle_rounds"] == NOTE_EVERY + 2
    assert report["problems"] and all(p["rewards"] == [0.0, 0.0] and not p["admitted"] for p in report["problems"])
    assert report["reward_counts"] == {"0.0": 2 * len(report["problems"])}
    first = report["problems"][0]
    assert first["ground_truth"] and first["prompt"] and "response" in first
    err = capsys.readouterr().out
    assert f"{NOTE_EVERY} rollout rounds without an admitted group" in err  # the progress line: never silent
    assert "stalled after" in err and f"ground truth {first['ground_truth']!r}" in err


def test_all_right_gets_the_too_easy_hint(tmp_path):
    s = session(tmp_path, ConstantReward(1.0), ["train.max_stall_rounds=2"])
    try:
        with pytest.raises(StallError, match="too easy"):
            train_step(s)
    finally:
        s.close()


class FailingReward(ConstantReward):
    """A reward function that raises on every sample: no reward is computed (as `RewardManager.score_detailed` says
    under `reward.max_error_frac=1.0`)."""

    def score_detailed(self, responses, *args, **kwargs):
        from ulorl.reward import RewardScores

        return RewardScores([0.0] * len(responses), ["mine: error: KeyError: 'x'"] * len(responses))


def test_a_reward_that_never_computes_stalls_with_a_hint_naming_it(tmp_path, capsys):
    s = session(tmp_path, FailingReward(0.0), ["train.max_stall_rounds=2", "algo.dynamic_sampling=false"])
    try:
        with pytest.raises(StallError) as e:
            train_step(s)
    finally:
        s.close()
    n = len(json.loads((tmp_path / "run" / "stall_report.json").read_text())["problems"])
    assert f"Hint: {n} of {n} groups hold samples without a reward ({2 * n} samples: the reward function failed " \
           "or ran past reward.timeout_s; the first: mine: error: KeyError: 'x'), and such a group is dropped, " \
           "never trained: fix the function, or raise reward.timeout_s" in str(e.value)
    report = json.loads((tmp_path / "run" / "stall_report.json").read_text())
    assert report["reward_counts"] == {"no reward": 2 * n}  # not 0.0: no reward was computed
    assert all(p["rewards"] == [None, None] and p["reward_failures"] == ["mine: error: KeyError: 'x'"] * 2
               for p in report["problems"])
    assert f"rewards seen: no reward x{2 * n}" in capsys.readouterr().out


def _seen(*groups: list[float], admitted: int = 0) -> RoundsSeen:
    """Groups of the given rewards (none truncated, every reward computed); the first `admitted` of them admitted."""
    return RoundsSeen([([SimpleNamespace(reward=r, truncated=False, reward_failure=None) for r in g], i < admitted)
                       for i, g in enumerate(groups)])


@pytest.mark.parametrize("groups, admitted, words", [
    # 19 of 20 groups all wrong, one mixed (admitted): the model rarely solves them, not "rewards rarely differ"
    ([[0.0] * 8] * 19 + [[1.0] + [0.0] * 7], 1, ["in 19 of 20 groups every answer got the lowest reward seen (0)",
                                                 "model.warm_start=sft"]),
    ([[1.0] * 4] * 9 + [[1.0, 0.0, 1.0, 1.0]], 1, ["in 9 of 10 groups every answer got the highest reward seen (1)",
                                                   "too easy"]),
    # a reward scale with a penalty: the lowest reward seen is -1, not 0
    ([[-1.0, -1.0]] * 10 + [[-1.0, 0.5]], 0, ["in 10 of 11 groups every answer got the lowest reward seen (-1)"]),
    # half all wrong, half all right: neither hint applies
    ([[0.0, 0.0]] * 5 + [[1.0, 1.0]] * 5, 0, ["rewards rarely differ within a group"]),
])
def test_the_hint_names_what_most_groups_saw(groups, admitted, words):
    text = hint(_seen(*groups, admitted=admitted), dynamic_sampling=True)
    for w in words:
        assert w in text, (w, text)


def test_mixed_rewards_do_not_stall(tmp_path):
    s = session(tmp_path, FakeReward(), ["train.max_stall_rounds=4"])
    try:
        for _ in range(5):  # reward = parity of a hash of the text: groups often differ; admitting resets the count
            train_step(s)
    except StallError:
        pytest.fail("a step with admitted groups stalled")
    finally:
        s.close()
    assert not (tmp_path / "run" / "stall_report.json").exists()


def test_cli_prints_one_line_error(tmp_path, capsys):
    """The random tiny model never answers right: `ulorl train` ends with one line, no traceback."""
    code = main(["train", "-o", str(tmp_path / "run"), "model.warm_start=none", "data.eval=null",
                 "data.train_size=20", "logging.progress=false", "logging.loggers=[jsonl]", "reward.fn=exact",
                 "rollout.max_response_len=4", "rollout.num_segments=1", "rollout.group_size=2",
                 "rollout.decode_batch=4", "train.train_groups=1", "train.max_stall_rounds=2"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code != 0 and len(err) == 1
    assert err[0].startswith("ulorl train: error: step 1: no group admitted in 2 rollout rounds") and "Hint:" in err[0]
    assert "Traceback" not in "\n".join(err)


def test_the_error_starts_a_line_of_its_own_after_the_progress_bar(tmp_path, capsys):
    """With the progress bar on, the bar is closed before the error is printed, not left mid-line."""
    code = main(["train", "-o", str(tmp_path / "run"), "model.warm_start=none", "data.eval=null",
                 "data.train_size=20", "logging.progress=true", "logging.loggers=[jsonl]", "reward.fn=exact",
                 "rollout.max_response_len=4", "rollout.num_segments=1", "rollout.group_size=2",
                 "rollout.decode_batch=4", "train.train_groups=1", "train.max_stall_rounds=2"])
    err = capsys.readouterr().err
    assert code != 0 and "ulorl train:" in err  # the bar's description
    last = err.rstrip("\n").rsplit("\n", 1)[-1]  # the last line, as a terminal shows it (after any "\r")
    assert last.startswith("ulorl train: error: step 1: no group admitted") and "Hint:" in last, err
