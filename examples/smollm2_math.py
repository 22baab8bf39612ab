"""SmolLM2-135M-Instruct learns school math by RL (configs/smollm2_math.yaml), in one command.

    bash scripts/setup.sh --real
    python examples/smollm2_math.py --work runs/smollm2_math                 # full fine-tuning, seed 0
    python examples/smollm2_math.py --work runs/smollm2_math --lora --seed 1 # LoRA (rank 16), training seed 1

Steps: (1) the problems, written once per data seed by examples/mathematics_data.py into WORK/data;
(2) `ulorl train -c configs/smollm2_math.yaml` into WORK/<full|lora>-seed<N> (held-out accuracy before and
after, the paired change, RUN/export); (3) `ulorl plot` of the run (smoothed curves) into RUN/plots.
Further `key=value` arguments are passed to `ulorl train` as overrides (e.g. train.steps=2 for a smoke run).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "configs" / "smollm2_math.yaml"
LORA = ["model.lora.rank=16", "model.lora.alpha=32", "train.lr=1e-4"]


def run(*cmd: str) -> None:
    """Run `cmd`; a failure ends this script with its exit status (the command printed its own error)."""
    print("$ " + " ".join(cmd), flush=True)
    done = subprocess.run(cmd)
    if done.returncode:
        raise SystemExit(done.returncode)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--work", default="runs/smollm2_math", help="folder for the data and the runs")
    p.add_argument("--lora", action="store_true", help="train LoRA adapters (rank 16) instead of every weight")
    p.add_argument("--seed", type=int, default=0, help="training seed (train.seed); the data seed stays 0")
    p.add_argument("--train", type=int, default=2000, help="training problems written")
    p.add_argument("--eval", type=int, default=300, help="held-out problems written (eval.num_problems uses 200)")
    args, overrides = p.parse_known_args(argv)
    work = Path(args.work)
    data = work / "data"
    if not (data / "train.jsonl").exists() or not (data / "heldout.jsonl").exists():
        run(sys.executable, str(ROOT / "examples" / "mathematics_data.py"), "--out", str(data), "--seed", "0",
            "--train", str(args.train), "--eval", str(args.eval))
    out = work / f"{'lora' if args.lora else 'full'}-seed{args.seed}"
    ulorl = [sys.executable, "-m", "ulorl.cli"]
    run(*ulorl, "train", "-c", str(CONFIG), "-o", str(out), f"data.train={data / 'train.jsonl'}",
        f"data.eval={data / 'heldout.jsonl'}", f"train.seed={args.seed}", *(LORA if args.lora else []), *overrides)
    run(*ulorl, "plot", str(out))


if __name__ == "__main__":
    main()
