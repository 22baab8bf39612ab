"""`ulorl export RUN [--step N]`: a run's trained policy as a plain Hugging Face folder.

The folder is what `transformers.AutoModelForCausalLM.from_pretrained` (and vLLM, llama.cpp's converter, the
Hub) read: `config.json`, `model.safetensors`, the tokenizer and `generation_config.json` (its `eos_token_id`
lists every id the run's engine stopped at). LoRA adapters are merged into the weights by peft
(`ulorl.models.lora.merged_model`), so no peft is needed to use it.

The source is a verified checkpoint (the newest committed one, or `--step N`), so an export never reads a
half-written state; a run exports its last checkpoint at the end when `checkpoint.export` is on (default),
into `RUN/export/`; `ulorl export RUN --step N` (or `ulorl export RUN/checkpoints/step_<N>`) writes
`RUN/export-step_<N>/`, leaving the run's own export as it is. The folder is written under a temporary name and
renamed: an existing export is replaced whole, and a folder holding anything an export does not write (a run
folder, notes, subfolders) is refused before any work, so `-o .` cannot delete a working directory.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from ulorl.data.formats import entries_besides
from ulorl.durable import replacing
from ulorl.errors import UlorlError
from ulorl.run.checkpoint import (CHECKPOINTS, LATEST, MANIFEST, CheckpointError, find_resumable, read_latest, step_dir,
                                  verify_checkpoint)
from ulorl.run.checkpoint.store import STEP_DIR, checkpoint_dirs, step_of

EXPORT_DIR = "export"
# what `save_pretrained` of a model and its tokenizer writes (any transformers version, sharded or not): the only
# files an existing output folder may hold for an export to replace it
EXPORT_FILES = ("config.json", "generation_config.json", "*.safetensors", "*.safetensors.index.json", "tokenizer*",
                "special_tokens_map.json", "added_tokens.json", "chat_template.*", "vocab.*", "merges.txt", "*.model")


class ExportError(UlorlError, ValueError):
    """An output folder that an export must not replace (the message names it and what it holds)."""


def check_export_target(out: str | Path) -> None:
    """Refuse `out` unless it is absent, an empty folder, or an earlier export (only `EXPORT_FILES`), and not inside
    a checkpoint (a `step_<N>` folder with a manifest, which lists its model's files): an export replaces its folder
    whole."""
    out = Path(out)
    inside = next((q for q in Path(os.path.abspath(out)).parents
                   if STEP_DIR.match(q.name) and (q / MANIFEST).is_file()), None)
    if inside is not None:
        raise ExportError(f"{out}: inside the checkpoint {inside}, which an export must not change; give a folder "
                          "outside it")
    if not out.exists() and not out.is_symlink():
        return
    if out.is_symlink() or not out.is_dir():
        raise ExportError(f"{out}: {'a link' if out.is_symlink() else 'a file'}, not a folder; give a new folder "
                          "for the export")
    if foreign := entries_besides(out, EXPORT_FILES):
        raise ExportError(f"{out}: holds what an export does not write ({foreign}); an export replaces its folder "
                          "whole, so give a new or empty folder, or an earlier export")


def checkpoint_of(run_dir: str | Path, step: int | None = None) -> Path:
    """The verified checkpoint of `run_dir` to export: step `step`, or the one a resume would pick; `run_dir` may
    be a checkpoint folder itself (`RUN/checkpoints/step_<N>`), or the run's `checkpoints/latest` (the checkpoint
    it names)."""
    if step is None and Path(run_dir).is_file() and Path(run_dir).name == LATEST:
        named, why = read_latest(Path(run_dir).parent)
        if named is None:
            raise CheckpointError(f"{run_dir}: {why}")
        run_dir = named
    if not Path(run_dir).is_dir():
        what = "is a file, not a run folder" if Path(run_dir).exists() else "no such folder"
        raise CheckpointError(f"{run_dir}: {what} (give the folder of a `ulorl train` run)")
    if (Path(run_dir) / MANIFEST).is_file():  # a checkpoint, not its run
        if step is not None and step_of(run_dir) != step:
            raise CheckpointError(f"{run_dir}: a checkpoint of step {step_of(run_dir)}, not {step}; give its run "
                                  f"folder with --step {step}, or this folder without --step")
        verify_checkpoint(Path(run_dir))
        return Path(run_dir)
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
        why = "; ".join(notes) if notes else "is it a ulorl train run folder?"
        raise CheckpointError(f"{run_dir}: no complete checkpoint to export ({why})")
    return path


def export_checkpoint(checkpoint: str | Path, out_dir: str | Path) -> Path:
    """Write the policy of `checkpoint` as a plain HF folder `out_dir` (adapters merged); returns `out_dir`."""
    from ulorl.config import ModelConfig
    from ulorl.models import eos_token_ids, load_tokenizer
    from ulorl.models.lora import load_policy_model, merged_model

    checkpoint, out = Path(checkpoint), Path(out_dir)
    check_export_target(out)
    saved = json.loads((checkpoint / "state.json").read_text()).get("config", {}).get("model", {})
    m = ModelConfig(dtype=saved.get("dtype", "float32"), trust_remote_code=bool(saved.get("trust_remote_code")))
    folder = checkpoint / "model"
    tokenizer = load_tokenizer(folder, m.trust_remote_code)
    model = merged_model(load_policy_model(m, folder))
    model.generation_config.eos_token_id = eos_token_ids(model, tokenizer)
    if model.generation_config.pad_token_id is None:
        model.generation_config.pad_token_id = tokenizer.pad_token_id
    out.parent.mkdir(parents=True, exist_ok=True)
    with replacing(out) as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
    return out


def add_export_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", help="a `ulorl train` run folder, or one of its checkpoints (RUN/checkpoints/step_<N>)")
    p.add_argument("--step", type=int, default=None, help="the checkpoint of step N (default: the newest complete one)")
    p.add_argument("--output", "-o", default=None, help="the folder to write, new or an earlier export (default: "
                   "RUN/export; with --step N, RUN/export-step_<N>)")


def run_export(args) -> int:
    """`ulorl export`: the run's checkpoint (`checkpoint_of`) into `--output` (default `RUN/export`, or
    `RUN/export-step_<N>` for `--step N`, so that an earlier step never replaces the run's final export)."""
    from ulorl.models.lora import adapter_base

    checkpoint = checkpoint_of(args.run, args.step)
    run, default = Path(args.run), EXPORT_DIR if args.step is None else f"{EXPORT_DIR}-{checkpoint.name}"
    if checkpoint == run:  # a checkpoint folder given: beside the run's own export (never inside the checkpoint)
        run = checkpoint.parent.parent if checkpoint.parent.name == CHECKPOINTS else checkpoint.parent
        default = f"{EXPORT_DIR}-{checkpoint.name}"
    out = export_checkpoint(checkpoint, args.output or run / default)
    # an adapter folder, as `load_policy_model` tells one when it rebuilds the policy that was just merged
    merged = "; LoRA adapters merged" if adapter_base(checkpoint / "model") is not None else ""
    print(f"exported {checkpoint.name} to {out} (config.json, model.safetensors, tokenizer, generation_config.json"
          f"{merged})")
    return 0
