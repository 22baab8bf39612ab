"""LoRA (`model.lora.rank > 0`): checkpoints hold the adapters only, and a SIGKILLed run resumes exactly.

A reference LoRA run of N steps runs here; the same run in a child process is SIGKILLed twice, once as soon
as samples.jsonl records step 2 (an update done, its checkpoint maybe not), once inside the save of the step
after that (test hook: renamed but `latest` not updated); `--resume auto` then completes it. Trained samples,
metrics and adapter weights must equal the reference's bit for bit. Every wait is for an event in the
child's output, never a delay. Skipped when peft is not installed.
"""

from __future__ import annotations

import json
import re
import signal

import pytest
from tests.procs import forkserver_context
from tests.run.checkpoint import resume_helpers as R
import torch

pytest.importorskip("peft")

from tests.run.checkpoint.test_resume_kill import Child, committed, wait_samples_step  # noqa: E402

from ulorl.run.checkpoint import CRASH_HOOK_ENV  # noqa: E402
from ulorl.run.loop import train  # noqa: E402

N = 6
LORA = ("model.lora.rank=4", "model.lora.alpha=8", "model.lora.target_modules=[q_proj,v_proj,down_proj]",
        f"train.steps={N}", "train.lr=1e-2")


def adapter_weights(checkpoint):
    from safetensors.torch import load_file

    return {k: v.clone() for k, v in load_file(checkpoint / "model" / "adapter_model.safetensors").items()}


def test_lora_checkpoint_holds_adapters_only_and_optimizer_covers_them(eos_model, tmp_path):
    run = tmp_path / "run"
    train(R.config(eos_model, *LORA[:3], "train.steps=1"), run)
    model_dir = R.latest(run) / "model"
    names = sorted(p.name for p in model_dir.iterdir())
    assert "adapter_model.safetensors" in names and "adapter_config.json" in names and "config.json" in names
    assert "model.safetensors" not in names  # the frozen base is not copied into every checkpoint
    weights = adapter_weights(R.latest(run))
    # 3 layers x 3 targets x (A, B); tiny model: hidden 128, v_proj 128 -> 2 KV heads x 32, down_proj 512 -> 128
    assert len(weights) == 18
    assert tuple(weights["model.layers.0.self_attn.q_proj.lora_A.weight"].shape) == (4, 128)  # (r, in)
    assert tuple(weights["model.layers.2.self_attn.v_proj.lora_B.weight"].shape) == (64, 4)  # (out, r)
    assert tuple(weights["model.layers.1.mlp.down_proj.lora_A.weight"].shape) == (4, 512)
    cfg = json.loads((model_dir / "adapter_config.json").read_text())
    assert cfg["r"] == 4 and cfg["lora_alpha"] == 8 and sorted(cfg["target_modules"]) == ["down_proj", "q_proj",
                                                                                          "v_proj"]
    assert cfg["base_model_name_or_path"] == str(eos_model.resolve())
    optimizer = torch.load(R.latest(run) / "optimizer.pt", weights_only=True)
    sizes = sorted(s["exp_avg"].numel() for s in optimizer["state"].values())
    assert sizes == sorted(w.numel() for w in weights.values())  # Adam moments of the adapters, nothing else


def test_lora_run_killed_twice_resumes_exactly(eos_model, tmp_path):
    ref = tmp_path / "reference"
    assert train(R.config(eos_model, *LORA), ref)["steps"] == N

    ctx = forkserver_context()
    run = tmp_path / "run"
    argv = ["train", "--output-dir", str(run), "--resume", "auto", *R.overrides(eos_model, *LORA)]
    child = Child(ctx, argv, tmp_path / "kill1.log")
    wait_samples_step(child, run, 2)
    child.kill()
    assert child.proc.exitcode == -signal.SIGKILL, child.text()
    first = committed(run)
    assert first in (1, 2)

    target = first + 1  # killed inside the save of the next step: renamed, `latest` not updated
    child = Child(ctx, argv, tmp_path / "kill2.log", {CRASH_HOOK_ENV: f"rename@{target}"})
    assert child.join() == 137, child.text()
    assert re.search(f"resuming from .*step_{first:06d} ", child.text()), child.text()
    assert committed(run) == first

    final = Child(ctx, argv, tmp_path / "final.log")
    assert final.join() == 0, final.text()
    assert re.search(f"resuming from .*step_{first:06d} ", final.text()), final.text()
    assert R.samples(run) == R.samples(ref)
    assert R.metrics(run) == R.metrics(ref)
    trained = adapter_weights(R.latest(ref))
    assert all(v.abs().sum() > 0 for k, v in trained.items() if "lora_B" in k)  # B starts at 0: it was trained
    R.assert_same_weights(adapter_weights(R.latest(run)), trained)
    assert R.pools(R.latest(run)) == R.pools(R.latest(ref))
