"""`ulorl export RUN [--step N]`: a run's trained policy as a plain Hugging Face folder.

The folder is what `transformers.AutoModelForCausalLM.from_pretrained` (and vLLM, llama.cpp's converter, the
Hub) read: `config.json`, `model.safetensors`, the tokenizer and `generation_config.json` (its `eos_token_id`
lists every id the run's engine stopped at). LoRA adapters are merged into the weights by peft
(`ulorl.models.lora.merged_model`), so no peft is needed to use it.

The source is a verified checkpoint (the newest committed one, or `--step N`), so an export never reads a
half-written state; a run exports its last checkpoint at the end when `checkpoint.export` is on (default),
into `RUN/export/`. The folder is written under a temporary name and renamed (an existing export is replaced
whole).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
from pathlib import Path

from ulorl.run.checkpoint import CHECKPOINTS, CheckpointError, find_resumable, step_dir, verify_checkpoint
from ulorl.run.checkpoint.store import checkpoint_dirs

EXPORT_DIR = "export"


def checkpoint_of(run_dir: str | Path, step: int | None = None) -> Path:
    """The verified checkpoint of `run_dir` to export: step `step`, or the one a resume would pick."""
    root = Path(run_dir) / CHECKPOINTS
    if step is not None:
        path = step_dir(root, step)
        if not path.is_dir():
            kept = [str(s) for s, _ in checkpoint_dirs(root)]
            raise CheckpointError(f"{run_dir}: no checkpoint of step {step} (" + (
                f"the run keeps steps {', '.join(kept)}" if kept else "it has no checkpoints") + ")")
        verify_checkpoint(path)
        return path
    path, notes = find_resumable(root)
    if path is None and not root.exists():
        from ulorl.run.sft import sft_run_model

        if (model := sft_run_model(run_dir)) is not None:
            raise CheckpointError(f"{run_dir}: a `ulorl sft` run, whose model is already a plain Hugging Face "
                                  f"folder: {model}")
    if path is None:
        raise CheckpointError(f"{run_dir}: no complete checkpoint to export" + (f" ({'; '.join(notes)})" if notes
                                                                               else " (is it a ulorl train run folder?)"))
    return path


def export_checkpoint(checkpoint: str | Path, out_dir: str | Path) -> Path:
    """Write the policy of `checkpoint` as a plain HF folder `out_dir` (adapters merged); returns `out_dir`."""
    from ulorl.config import ModelConfig
    from ulorl.models import eos_token_ids, load_tokenizer
    from ulorl.models.lora import load_policy_model, merged_model

    checkpoint, out = Path(checkpoint), Path(out_dir)
    saved = json.loads((checkpoint / "state.json").read_text()).get("config", {}).get("model", {})
    m = ModelConfig(dtype=saved.get("dtype", "float32"), trust_remote_code=bool(saved.get("trust_remote_code")))
    folder = checkpoint / "model"
    tokenizer = load_tokenizer(folder, m.trust_remote_code)
    model = merged_model(load_policy_model(m, folder))
    model.generation_config.eos_token_id = eos_token_ids(model, tokenizer)
    if model.generation_config.pad_token_id is None:
        model.generation_config.pad_token_id = tokenizer.pad_token_id
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f"{out.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def add_export_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", help="a `ulorl train` run folder")
    p.add_argument("--step", type=int, default=None, help="the checkpoint of step N (default: the newest complete one)")
    p.add_argument("--output", "-o", default=None, help="the folder to write (default: RUN/export)")


def run_export(args) -> int:
    """`ulorl export`: the run's checkpoint (`checkpoint_of`) into `--output` (default `RUN/export`)."""
    from ulorl.models.lora import adapter_base

    checkpoint = checkpoint_of(args.run, args.step)
    out = export_checkpoint(checkpoint, args.output or Path(args.run) / EXPORT_DIR)
    # an adapter folder, as `load_policy_model` tells one when it rebuilds the policy that was just merged
    merged = "; LoRA adapters merged" if adapter_base(checkpoint / "model") is not None else ""
    print(f"exported {checkpoint.name} to {out} (config.json, model.safetensors, tokenizer, generation_config.json"
          f"{merged})")
    return 0
