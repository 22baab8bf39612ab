"""Helpers of the resume tests (not a test module): the run config, reading a run's outputs, a CLI child.

The runs use a tiny random model whose EOS token is made likely (`make_eos_model`), so answers end at
varied lengths within and across segments, and the built-in `exact` reward with the soft overlong
penalty spanning the whole length (reward = -length / L), so rewards differ within a group and every
update really moves the weights. No reward worker processes are started.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch

N_SEGMENTS = 4
MAX_LEN = 32


def make_eos_model(out: Path, strength: float = 0.5) -> Path:
    """The built-in tiny model with the EOS embedding row turned toward the mean final hidden state."""
    from ulorl.models import build_tiny_model, load_model, load_tokenizer

    build_tiny_model(out)
    tok, model = load_tokenizer(out), load_model(out)
    with torch.no_grad():
        text = tok.apply_chat_template([{"role": "user", "content": "chain start 9 steps 4"}],
                                       add_generation_prompt=True, tokenize=False)
        ids = torch.tensor([tok(text)["input_ids"]])
        h = model.model(input_ids=ids).last_hidden_state[0].mean(0)
        model.get_input_embeddings().weight[tok.eos_token_id] = strength * h / h.norm()
    model.save_pretrained(out, safe_serialization=True)
    return out


def overrides(model_dir: Path, *extra: str) -> list[str]:
    return ["model.warm_start=none", f"model.path={model_dir}", "data.eval=null", "data.train_size=3",
            f"rollout.max_response_len={MAX_LEN}", f"rollout.num_segments={N_SEGMENTS}", "rollout.group_size=2",
            "rollout.decode_batch=8", "train.train_groups=2", "train.lr=1e-3", "logging.progress=false",
            "logging.loggers=[jsonl]", "reward.fn=exact", "reward.overlong=soft_penalty",
            f"reward.overlong_buffer={MAX_LEN}", "algo.dynamic_sampling=false", "checkpoint.every=1",
            "checkpoint.keep=2", *extra]


def config(model_dir: Path, *extra: str):
    from ulorl.config import load_run_config

    return load_run_config(None, overrides(model_dir, *extra))


def copy_run(src: Path, dst: Path) -> Path:
    """A copy of a run folder to damage or resume (symlinks kept as links, as a user's copy would)."""
    import shutil

    shutil.copytree(src, dst, symlinks=True)
    return dst


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def metrics(run: Path) -> list[dict]:
    """metrics.jsonl rows without the wall-clock dependent timing_s/*, perf/* and pipeline/* values."""
    return [{k: v for k, v in row.items() if not k.startswith(("timing_s/", "perf/", "pipeline/"))}
            for row in read_jsonl(run / "metrics.jsonl")]


def samples(run: Path, status: str | None = "trained") -> list[dict]:
    return [r for r in read_jsonl(run / "samples.jsonl") if status is None or r["status"] == status]


def latest(run: Path) -> Path | None:
    pointer = run / "checkpoints" / "latest"
    return run / "checkpoints" / pointer.read_text().strip() if pointer.exists() else None


def weights(checkpoint: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    # copies: the loaded tensors may map the file, which a test may then damage or a later save replace
    return {k: v.clone() for k, v in load_file(checkpoint / "model" / "model.safetensors").items()}


def assert_same_weights(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), f"{k} differs"


def state(checkpoint: Path) -> dict:
    """state.json without the history's wall-clock phase times (`phase_s`)."""
    s = json.loads((checkpoint / "state.json").read_text())
    s["history"].pop("phase_s", None)
    return s


def pools(checkpoint: Path) -> dict:
    return json.loads((checkpoint / "pools.json").read_text())


def cli_child(argv: list[str], env: dict[str, str], log: str) -> None:
    """Body of a killable child process: `ulorl <argv>` with stdout/stderr in `log` (line-buffered)."""
    os.environ.update(env)
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    sys.stdout = open(1, "w", buffering=1, closefd=False)
    sys.stderr = open(2, "w", buffering=1, closefd=False)
    torch.set_num_threads(1)
    import threading

    from tqdm.auto import tqdm

    tqdm.set_lock(threading.RLock())  # tqdm's default lock is a multiprocessing semaphore, leaked by SIGKILL
    from ulorl.cli import main

    code = main(argv)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
