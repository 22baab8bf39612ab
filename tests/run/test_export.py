"""`ulorl export` and the end-of-run export (ulorl/run/export.py): a plain HF folder that transformers loads and
that generates the same greedy tokens as our engine on the trained policy, for full fine-tuning and for LoRA
(merged). The reference is the policy as the run left it, loaded from its checkpoint the way a resume loads it.
"""

from __future__ import annotations

import errno
import json
import os

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel

from ulorl.cli import main
from ulorl.config import ModelConfig, load_run_config
from ulorl.models import eos_token_ids, load_tokenizer
from ulorl.models.lora import load_policy_model
from ulorl.rollout.engines import SamplingParams, TorchEngine
from ulorl.run.loop import train


def run_overrides(model_dir, *extra):
    return ["model.warm_start=none", f"model.path={model_dir}", "data.eval=null",
            "rollout.max_response_len=16", "rollout.num_segments=2", "rollout.group_size=2", "rollout.decode_batch=4",
            "train.train_groups=2", "train.steps=2", "train.lr=5e-2", "logging.progress=false",
            "logging.loggers=[jsonl]", "reward.fn=exact", "reward.overlong=soft_penalty", "reward.overlong_buffer=16",
            "data.train_size=4",
            "algo.dynamic_sampling=false", "checkpoint.every=1", *extra]


KINDS = {"full": (), "lora": ("model.lora.rank=4", "model.lora.alpha=16")}


@pytest.mark.parametrize("kind", list(KINDS))
def test_exported_folder_generates_our_engines_greedy_tokens(eos_model_dir, tmp_path, kind, capsys):
    if kind == "lora":
        pytest.importorskip("peft")
    run = tmp_path / "run"
    summary = train(load_run_config(None, run_overrides(eos_model_dir, *KINDS[kind])), run)
    out = run / "export"
    assert summary["export_dir"] == str(out)
    assert {"config.json", "model.safetensors", "generation_config.json", "tokenizer.json"} <= {
        p.name for p in out.iterdir()}
    assert not (out / "adapter_config.json").exists()
    assert main(["export", str(run), "-o", str(tmp_path / "again")]) == 0  # the command says what it merged
    assert ("LoRA adapters merged" in capsys.readouterr().out) is (kind == "lora")

    ckpt = run / "checkpoints" / "step_000002" / "model"
    ours = load_policy_model(ModelConfig(), str(ckpt))  # the run's final policy (adapters apart for LoRA)
    tok = load_tokenizer(str(ckpt))
    theirs = AutoModelForCausalLM.from_pretrained(out, local_files_only=True)
    their_tok = AutoTokenizer.from_pretrained(out, local_files_only=True)
    base = AutoModelForCausalLM.from_pretrained(eos_model_dir, local_files_only=True)
    assert any(not torch.equal(a, b) for a, b in zip(theirs.state_dict().values(), base.state_dict().values()))

    eos = eos_token_ids(ours, tok)
    assert theirs.generation_config.eos_token_id == eos
    prompts = [[{"role": "user", "content": f"chain start {i} steps 3"}] for i in range(4)]
    ids = [tok.apply_chat_template(p, add_generation_prompt=True, tokenize=True, return_dict=False) for p in prompts]
    assert ids == [their_tok.apply_chat_template(p, add_generation_prompt=True, tokenize=True, return_dict=False)
                   for p in prompts]
    engine = TorchEngine(ours, eos, max_batch=4).generate(ids, 12, SamplingParams(greedy=True))
    assert sum(len(o.tokens) for o in engine) > 4 * 3, [o.tokens for o in engine]  # answers, not a lone EOS
    for prefix, o in zip(ids, engine):
        with torch.no_grad():
            g = theirs.generate(torch.tensor([prefix]), max_new_tokens=12, do_sample=False)[0, len(prefix):]
        assert g.tolist() == o.tokens


def test_export_command_writes_the_chosen_step(eos_model_dir, tmp_path, capsys):
    run = tmp_path / "run"
    train(load_run_config(None, run_overrides(eos_model_dir, "checkpoint.export=false", "checkpoint.keep=2")), run)
    assert not (run / "export").exists()
    assert main(["export", str(run), "--step", "1", "-o", str(tmp_path / "step1")]) == 0
    out = capsys.readouterr().out
    assert f"exported step_000001 to {tmp_path / 'step1'} (" in out and "LoRA" not in out  # no adapters to merge
    exported = AutoModelForCausalLM.from_pretrained(tmp_path / "step1", local_files_only=True).state_dict()
    from safetensors.torch import load_file

    step1 = load_file(run / "checkpoints" / "step_000001" / "model" / "model.safetensors")
    assert all(torch.equal(exported[k], v) for k, v in step1.items())
    assert main(["export", str(run), "--step", "7"]) == 2  # no such checkpoint: one line, exit 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no checkpoint of step 7 (the run keeps steps 1, 2)" in err[0], err
    assert json.loads((run / "summary.json").read_text())["steps"] == 2
    # a checkpoint folder itself (it was taken for a `ulorl sft` run: it holds model/config.json), exported beside
    # the run's exports, never into the checkpoint
    step2 = run / "checkpoints" / "step_000002"
    assert main(["export", str(step2)]) == 0
    assert f"exported step_000002 to {run / 'export-step_000002'} (" in capsys.readouterr().out
    exported = AutoModelForCausalLM.from_pretrained(run / "export-step_000002", local_files_only=True).state_dict()
    assert all(torch.equal(exported[k], v) for k, v in load_file(step2 / "model" / "model.safetensors").items())
    assert main(["export", str(step2), "--step", "1"]) == 2
    assert f"{step2}: a checkpoint of step 2, not 1; give its run folder with --step 1" in capsys.readouterr().err
    # the run's pointer `checkpoints/latest`: the checkpoint it names
    assert main(["export", str(run / "checkpoints" / "latest"), "-o", str(tmp_path / "latest")]) == 0
    assert f"exported step_000002 to {tmp_path / 'latest'} (" in capsys.readouterr().out


def test_export_never_replaces_a_folder_it_did_not_write(eos_model_dir, tmp_path, capsys, monkeypatch):
    """An export replaces its output folder whole, so a folder that holds anything else (a working directory, the
    run folder) is refused before any work, with the folder and what it holds named; so is a checkpoint's model
    folder (its manifest lists the files). An earlier export and an empty folder are replaced. `--step N` without
    `-o` writes RUN/export-step_<N>, leaving the run's final export as it was."""
    run = tmp_path / "run"
    train(load_run_config(None, run_overrides(eos_model_dir, "checkpoint.keep=2")), run)
    final = {p.name: p.read_bytes() for p in (run / "export").iterdir()}
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("precious")
    (mine / "model.safetensors").write_bytes(b"x")
    ckpt_model = run / "checkpoints" / "step_000002" / "model"
    ckpt_files = {p.name: p.read_bytes() for p in ckpt_model.iterdir()}
    for out, says in ((mine, f"{mine}: holds what an export does not write (notes.txt)"),
                      (run, "checkpoints/, config.yaml, export/ and "),
                      (ckpt_model, f"inside the checkpoint {run / 'checkpoints' / 'step_000002'}"),
                      (mine / "notes.txt", "a file, not a folder")):
        assert main(["export", str(run), "-o", str(out)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and says in err[0], err
    assert (mine / "notes.txt").read_text() == "precious" and (run / "checkpoints").is_dir()
    assert {p.name: p.read_bytes() for p in ckpt_model.iterdir()} == ckpt_files

    assert main(["export", str(run), "--step", "1"]) == 0  # its own folder, beside the run's final export
    assert f"exported step_000001 to {run / 'export-step_000001'} (" in capsys.readouterr().out
    assert {p.name: p.read_bytes() for p in (run / "export").iterdir()} == final
    assert (run / "export-step_000001" / "model.safetensors").read_bytes() != final["model.safetensors"]
    assert main(["export", str(run), "-o", str(run / "export-step_000001")]) == 0  # an earlier export: replaced
    assert (run / "export-step_000001" / "model.safetensors").read_bytes() == final["model.safetensors"]
    (tmp_path / "empty").mkdir()
    assert main(["export", str(run), "-o", str(tmp_path / "empty")]) == 0
    assert (tmp_path / "empty" / "config.json").is_file()

    (tmp_path / "project").mkdir()  # a MANIFEST.json of something else, not a checkpoint's step folder
    (tmp_path / "project" / "MANIFEST.json").write_text("{}")
    assert main(["export", str(run), "-o", str(tmp_path / "project" / "model")]) == 0

    # a full disk while writing over an earlier export: that export is kept whole, and the error names the file
    # of the output folder, not of the temporary folder written beside it
    kept = {p.name: p.read_bytes() for p in (tmp_path / "empty").iterdir()}

    def full_disk(self, folder, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), os.path.join(folder, "model.safetensors"))

    monkeypatch.setattr(PreTrainedModel, "save_pretrained", full_disk)
    assert main(["export", str(run), "-o", str(tmp_path / "empty")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{tmp_path / 'empty' / 'model.safetensors'}: No space left" in err[0], err
    assert {p.name: p.read_bytes() for p in (tmp_path / "empty").iterdir()} == kept
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]
