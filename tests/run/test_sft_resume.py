"""An interrupted SFT continues from its last saved state to the weights of the uninterrupted SFT (`ulorl.run
.sft_state`), in `run_sft`, in `ulorl sft` and in a train run's warm start; a warm start made with other settings
is made again, never reused."""

import json
import os
import signal

import pytest
import torch
from safetensors.torch import load_file

from ulorl.cli import main
from ulorl.config import ModelConfig, SFTConfig
from ulorl.run.sft import SFTStopped, run_sft
from ulorl.run.sft_state import SETTINGS_FILE, STATE_FILE, SFTStateError

# every part of the loop's state: a short phase (bucketed epochs), a full phase with a tail that leaves at its first
# check (step 4 + 3 = 7), heads, checks every 3 full-phase steps
CURRICULUM = dict(task="builtin:odometer", alpha=0.5, max_size=12, tail=0.1, tail_max_size=20, check_every=3,
                  tail_until_p_long=0.0, check_problems=2, check_min_size=13, bucketed=True, batch_tokens=512,
                  batch_size=4, steps=14, short_steps=4, short_max_size=6, heads=0.1, head_lines=2, num_examples=60,
                  warmup_steps=2, lr=3e-3)
# a short phase that goes on past its 3 steps to short_max_steps=6 (its loss never under 0.001), then 5 full steps
EXTENDED = dict(task="builtin:odometer", alpha=0.5, max_size=12, bucketed=True, batch_tokens=512, batch_size=4, steps=8,
                short_steps=3, short_max_size=6, short_until_loss=0.001, short_max_steps=6, num_examples=60,
                warmup_steps=1, lr=3e-3)
# random batches, and checks of `sft.until_p` that never meet it: the SFT goes on past its steps to max_steps
UNTIL = dict(steps=6, warmup_steps=2, lr=3e-3, num_examples=60, batch_size=4, check_every=3, check_problems=2,
             max_steps=9, until_p=1.0)


def _rows(folder):
    """metrics.jsonl without its wall-clock times."""
    rows = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if k != "timing_s/elapsed"} for r in rows]


def _weights(model_dir):
    return load_file(model_dir / "model.safetensors")


def _same(a, b):
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.fixture
def fail_at_step(monkeypatch):
    """`fail_at_step(k, action)`: the k-th optimizer step of the SFT does `action()` instead of its update (a kill
    there: the steps before it are done, it is not)."""
    def arm(k, action):
        real, calls = torch.optim.AdamW.step, []

        def step(self, *a, **kw):
            calls.append(1)
            if len(calls) == k:
                action()
            return real(self, *a, **kw)

        monkeypatch.setattr(torch.optim.AdamW, "step", step)
        return lambda: monkeypatch.setattr(torch.optim.AdamW, "step", real)
    return arm


def _crash():
    raise RuntimeError("killed")


@pytest.mark.parametrize("settings, killed_at", [
    (CURRICULUM, 3), (CURRICULUM, 6), (CURRICULUM, 9), (CURRICULUM, 14),  # short, full, after the tail left, last
    (EXTENDED, 6)])  # in the short phase's extension (the save after its 4th step, past its 3 planned)
def test_an_sft_killed_in_a_step_continues_from_its_last_save_to_the_same_weights(tmp_path, tiny_model_dir, capsys,
                                                                                 fail_at_step, settings, killed_at):
    model = ModelConfig(path=str(tiny_model_dir))
    reference = run_sft(model, SFTConfig(**settings), tmp_path / "ref", progress=False)
    cfg = SFTConfig(**settings, save_every=2)  # not a setting of the weights: the same SFT as the reference's
    disarm = fail_at_step(killed_at, _crash)
    with pytest.raises(RuntimeError, match="killed"):
        run_sft(model, cfg, tmp_path / "sft", progress=False)
    disarm()
    saved = (killed_at - 1) // 2 * 2
    assert len(_rows(tmp_path / "sft")) == killed_at - 1  # logged past the save: those steps are lost, and redone
    assert (tmp_path / "sft" / STATE_FILE).exists() and not (tmp_path / "sft" / "model").exists()
    (tmp_path / "sft" / f"{STATE_FILE}.tmp-99999").write_bytes(b"half a save")  # a kill during a save leaves this
    capsys.readouterr()
    done = run_sft(model, cfg, tmp_path / "sft", progress=False)
    assert f"continuing the interrupted SFT in {tmp_path / 'sft'} after its step {saved}" in capsys.readouterr().out
    assert not (tmp_path / "sft" / f"{STATE_FILE}.tmp-99999").exists()
    _same(_weights(done), _weights(reference))
    assert _rows(tmp_path / "sft") == _rows(tmp_path / "ref")  # losses, learning rates, phases and checks
    if settings is CURRICULUM:
        assert [r["step"] for r in _rows(tmp_path / "sft") if "sft/p_long" in r] == [7, 14]  # the tail left at 7
    else:
        assert [r["sft/phase"] for r in _rows(tmp_path / "sft")] == ["short"] * 6 + ["full"] * 5
    assert not (tmp_path / "sft" / STATE_FILE).exists()  # the finished SFT keeps its model, not its state


def test_a_signal_stops_the_sft_after_its_step_with_its_state_saved(tmp_path, tiny_model_dir, fail_at_step):
    model = ModelConfig(path=str(tiny_model_dir))
    reference = run_sft(model, SFTConfig(**UNTIL), tmp_path / "ref", progress=False)
    cfg = SFTConfig(**UNTIL, save_every=0)  # no periodic save: the signal's is the only one
    disarm = fail_at_step(7, lambda: os.kill(os.getpid(), signal.SIGINT))  # past sft.steps, in the extension
    with pytest.raises(SFTStopped) as stopped:
        run_sft(model, cfg, tmp_path / "sft", progress=False)
    disarm()
    assert stopped.value.step == 7 and isinstance(stopped.value, KeyboardInterrupt)
    assert len(_rows(tmp_path / "sft")) == 7 and (tmp_path / "sft" / STATE_FILE).exists()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the SFT's handler is gone
    done = run_sft(model, cfg, tmp_path / "sft", progress=False)
    _same(_weights(done), _weights(reference))
    assert _rows(tmp_path / "sft") == _rows(tmp_path / "ref") and len(_rows(tmp_path / "ref")) == 9


def test_a_saved_state_of_other_settings_is_refused_and_kept(tmp_path, tiny_model_dir, fail_at_step):
    model = ModelConfig(path=str(tiny_model_dir))
    disarm = fail_at_step(4, _crash)
    with pytest.raises(RuntimeError):
        run_sft(model, SFTConfig(**UNTIL, save_every=2), tmp_path / "sft", progress=False)
    disarm()
    state = (tmp_path / "sft" / STATE_FILE).read_bytes()
    with pytest.raises(SFTStateError, match=r"holds the saved state of an SFT with other settings \(sft.lr: 0.003 -> "
                                            r"0.002\): continue it with its settings, or choose another folder"):
        run_sft(model, SFTConfig(**{**UNTIL, "lr": 2e-3}), tmp_path / "sft", progress=False)
    assert (tmp_path / "sft" / STATE_FILE).read_bytes() == state
    (tmp_path / "sft" / STATE_FILE).write_bytes(state[: len(state) // 2])  # damaged by hand
    with pytest.raises(SFTStateError, match=f"{tmp_path / 'sft' / STATE_FILE}: not an SFT state this model can "
                                            "continue from .*; delete it to start the SFT over"):
        run_sft(model, SFTConfig(**UNTIL), tmp_path / "sft", progress=False)


SMALL_SFT = ["sft.steps=4", "sft.num_examples=24", "sft.batch_size=4", "sft.warmup_steps=1", "sft.save_every=2"]


def test_sft_command_continues_an_interrupted_sft_and_says_how(tmp_path, tiny_model_dir, capsys, fail_at_step):
    args = [f"model.path={tiny_model_dir}", "data.eval=null", "logging.progress=false", *SMALL_SFT]
    assert main(["sft", "-o", str(tmp_path / "ref"), *args]) == 0
    run = tmp_path / "sft"
    disarm = fail_at_step(4, lambda: os.kill(os.getpid(), signal.SIGINT))
    assert main(["sft", "-o", str(run), *args]) == 130
    disarm()
    out = capsys.readouterr().out
    assert f"sft: stopped by a signal after step 4; its state is saved in {run / STATE_FILE}" in out
    assert f"the same command continues it: ulorl sft --config {run / 'config.yaml'} --output-dir {run}" in out
    assert main(["sft", "--config", str(run / "config.yaml"), "--output-dir", str(run)]) == 0
    out = capsys.readouterr().out
    assert "continuing the interrupted SFT" in out and "earlier-" not in out  # continued, not moved aside
    _same(_weights(run / "model"), _weights(tmp_path / "ref" / "model"))
    assert _rows(run) == _rows(tmp_path / "ref")


def test_train_continues_an_interrupted_warm_start_and_remakes_one_of_other_settings(tmp_path, tiny_model_dir, capsys,
                                                                                    fail_at_step):
    args = [f"model.path={tiny_model_dir}", "data.eval=null", "data.train_size=20", "rollout.max_response_len=8",
            "rollout.group_size=2", "rollout.decode_batch=4", "train.train_groups=1", "train.steps=1",
            "algo.dynamic_sampling=false", "logging.progress=false", "logging.loggers=[jsonl]"]
    assert main(["sft", "-o", str(tmp_path / "ref"), *args, *SMALL_SFT]) == 0
    run = tmp_path / "run"
    disarm = fail_at_step(4, _crash)  # a kill in the SFT's 4th step: its state after step 2 is on disk
    with pytest.raises(RuntimeError, match="killed"):
        main(["train", "-o", str(run), "--debug", *args, *SMALL_SFT])
    disarm()
    assert (run / "warm_start.partial" / STATE_FILE).exists() and not (run / "warm_start").exists()
    capsys.readouterr()
    assert main(["train", "-o", str(run), "--resume", "auto", *args, *SMALL_SFT]) == 0
    said = capsys.readouterr().out
    assert f"continuing the interrupted SFT in {run / 'warm_start.partial'} after its step 2" in said
    _same(_weights(run / "warm_start" / "model"), _weights(tmp_path / "ref" / "model"))
    assert _rows(run / "warm_start") == _rows(tmp_path / "ref")
    assert not (run / "warm_start.partial").exists() and not (run / "warm_start" / STATE_FILE).exists()

    # a fresh start with the same SFT settings reuses it; with others, moves it aside and makes another
    assert main(["train", "-o", str(run), "--resume", "never", *args, *SMALL_SFT, "sft.threads=1"]) == 0
    assert f"reusing the SFT warm start in {run / 'warm_start' / 'model'}" in capsys.readouterr().out
    assert main(["train", "-o", str(run), "--resume", "never", *args, *SMALL_SFT, "sft.steps=3"]) == 0
    out = capsys.readouterr().out
    assert f"the SFT warm start in {run / 'warm_start'} was made with other settings (sft.steps: 4 -> 3): it is " \
           "made again" in out
    aside = sorted(p for p in run.iterdir() if p.name.startswith("earlier-") and (p / "warm_start").exists())
    assert len(aside) == 1 and len(_rows(aside[0] / "warm_start")) == 4 and len(_rows(run / "warm_start")) == 3
    assert json.loads((run / "warm_start" / SETTINGS_FILE).read_text())["sft"]["steps"] == 3


def test_sft_command_interrupted_in_its_evaluation_evaluates_the_trained_model_again(tmp_path, tiny_model_dir, capsys,
                                                                                    monkeypatch):
    from ulorl.run import sft_report

    args = ["-o", str(tmp_path / "sft"), f"model.path={tiny_model_dir}", "logging.progress=false", *SMALL_SFT,
            "data.eval_size=2", "eval.k=1", "eval.pass_k=[1]", "eval.max_new_tokens=4"]
    real = sft_report.evaluate_model

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(sft_report, "evaluate_model", interrupted)
    assert main(["sft", *args]) == 130
    trained = (tmp_path / "sft" / "metrics.jsonl").read_text()
    weights = (tmp_path / "sft" / "model" / "model.safetensors").read_bytes()
    monkeypatch.setattr(sft_report, "evaluate_model", real)
    capsys.readouterr()
    assert main(["sft", *args]) == 0
    out = capsys.readouterr().out
    assert f"the SFT in {tmp_path / 'sft'} is done and its report is not: its model is evaluated" in out
    assert "earlier-" not in out and "continuing" not in out  # nothing moved aside, no step trained again
    assert (tmp_path / "sft" / "metrics.jsonl").read_text() == trained
    assert (tmp_path / "sft" / "model" / "model.safetensors").read_bytes() == weights
    assert json.loads((tmp_path / "sft" / "sft_report.json").read_text())["eval"]["num_problems"] == 2
    assert main(["sft", *args]) == 0  # a finished SFT with its report: the next one starts over, the first kept
    assert "starting over: the earlier SFT's model" in capsys.readouterr().out
