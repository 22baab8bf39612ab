"""samples.jsonl records the decoded response text (clipped); `ulorl show` prints a step's samples."""

import json
import re

from ulorl.run.samples_log import clip_text
from ulorl.cli import main
from ulorl.config import load_run_config
from ulorl.run.session import open_session
from ulorl.rollout.engines.scripted import ScriptedEngine
from ulorl.run.loop import train_step
from tests.conftest import FakeReward  # reward = parity of a hash of the text: mixed within groups


def test_clip_text_keeps_start_and_end():
    assert clip_text("abcdef", 10) == "abcdef" and clip_text("abcdef", None) == "abcdef"
    # 10 chars, budget 4: first 2 + last 2, 6 cut
    assert clip_text("0123456789", 4) == "01…[6 chars cut]…89"
    assert clip_text("0123456789", 1) == "0…[9 chars cut]…"


def run_steps(tmp_path, overrides, steps=2):
    cfg = load_run_config(None, ["model.warm_start=none", "data.eval=null", "data.train_size=50",
                                 "logging.progress=false", "logging.loggers=[jsonl]", "rollout.max_response_len=16",
                                 "rollout.num_segments=2", "rollout.group_size=2", "rollout.decode_batch=4",
                                 "train.train_groups=1", "algo.dynamic_sampling=false", *overrides])
    s = open_session(cfg, tmp_path / "run")
    s.engine = ScriptedEngine([3, 12, 5, 9], eos_id=s.tokenizer.eos_token_id)
    s.rollout.engine = s.engine
    s.reward.close()
    s.reward = FakeReward()
    for _ in range(steps):
        train_step(s)
    s.samples._f.flush()
    recs = [json.loads(line) for line in (s.run_dir / "samples.jsonl").read_text().splitlines()]
    return s, recs


def test_samples_record_decoded_text(tmp_path):
    s, recs = run_steps(tmp_path, [])
    try:
        assert recs and all("response" in r for r in recs)
        assert all(r["ground_truth"] and r["data_source"] for r in recs)
        # the text is what the tokenizer makes of the scripted tokens (lengths 3..12 tokens: well under 2000 chars)
        lengths = {r["response_length"] for r in recs}
        assert len(lengths) > 1 and all(r["response"] for r in recs if r["response_length"] > 1)
    finally:
        s.close()


def test_text_truncation_and_off(tmp_path):
    s, recs = run_steps(tmp_path / "a", ["logging.sample_text_chars=6"])
    s.close()
    marker = re.compile(r"…\[(\d+) chars cut\]…")
    clipped = [r["response"] for r in recs if marker.search(r["response"])]
    assert clipped and all(len(marker.sub("", t)) == 6 for t in clipped)  # 3 first + 3 last characters
    assert all(len(r["response"]) <= 6 for r in recs if not marker.search(r["response"]))
    s, recs = run_steps(tmp_path / "b", ["logging.sample_text_chars=0"])
    s.close()
    assert recs and not any("response" in r for r in recs)


def test_ulorl_show_prints_a_step(tmp_path, capsys):
    s, recs = run_steps(tmp_path, [], steps=2)
    s.close()
    capsys.readouterr()  # the session's start-up lines
    run = str(tmp_path / "run")
    assert main(["show", run, "--step", "2"]) == 0
    out = capsys.readouterr().out
    step2 = [r for r in recs if r["step"] == 2]
    n_groups = len({r["group_id"] for r in step2})
    groups = f"{n_groups} group{'s' * (n_groups > 1)}"
    assert len(step2) > 1 and out.startswith(f"step 2: {len(step2)} samples in {groups} (")
    for r in step2:
        assert f"{r['sample_id']}  reward {r['reward']:.3f}  length {r['response_length']}" in out
        assert f"segments {r['num_segments']} (versions {','.join(map(str, r['versions']))})" in out
    assert all(r["sample_id"] not in out for r in recs if r["step"] == 1)
    # default: the last step; an absent step lists the ones logged
    assert main(["show", run]) == 0 and capsys.readouterr().out.startswith("step 2:")
    assert main(["show", run, "--step", "9"]) == 2 and "steps logged: 1-2" in capsys.readouterr().err  # a user error


def test_show_prints_a_text_once_per_group():
    from ulorl.run.show import format_step

    def rec(i, text, length):
        return {"step": 1, "group_id": "g1", "sample_id": f"g1/{i}", "status": "trained", "reward": 1.0,
                "response": text, "response_length": length, "num_segments": 1, "versions": [0]}

    out = format_step([rec(0, "1 2 : 3", 7), rec(1, "1 2 : 3", 7), rec(2, "1 2 : 4", 7), rec(3, "1 2 : 3", 9)], 1)
    assert out.count("| 1 2 : 3") == 2 and out.count("| 1 2 : 4") == 1  # g1/3: the same text, another length
    assert out.count("(the same recorded text as g1/0)") == 1
    assert out.index("g1/1  reward") < out.index("(the same recorded text as g1/0)") < out.index("g1/2  reward")
