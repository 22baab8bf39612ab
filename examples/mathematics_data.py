"""Real school-level math problems, generated locally by DeepMind's `mathematics_dataset` (PyPI), as JSONL.

    pip install mathematics-dataset          # in ulorl's `real` extra (bash scripts/setup.sh --real)
    python examples/mathematics_data.py --out runs/smollm2_math/data --seed 0 --train 2000 --eval 300

Writes `train.jsonl` and `heldout.jsonl`, rows `{"prompt", "answer", "data_source", "extra_info"}` as
`ulorl train` reads them (docs/data.md). The problems come from the modules in `MODULES`, below the
package's `train-easy` split by default (`--difficulty easiest`: half a range's width under each module's
lowest entropy, so one-digit operands and small numbers), in equal shares; every module
and split draws from its own RNG seeded from (`--seed`, split, module), so the files depend on the seed
alone. Held-out problems whose question also appears in the training file are dropped and replaced.
The package iterates over sets in places, whose order follows Python's string hashing, so `main` re-runs
itself under PYTHONHASHSEED=0 when that is not already set: the same seed gives the same bytes.

The modules and the difficulty were chosen for SmolLM2-135M-Instruct: numeric answers that the `gsm8k`
extractor (a box, an `Answer:` line, else the last number) and math-verify compare, and problems the model
solves some of the time (docs/real_models.md has its accuracy by module; at `train-easy` it solved none).

Compatibility: mathematics_dataset 1.0.1 imports `sympy.solvers.diophantine.base_solution_linear`, which
sympy >= 1.7 keeps one module deeper; `_patch_sympy` points the old name at it before importing.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import importlib.util
import json
import os
import random
import sys
from pathlib import Path

# module name in mathematics_dataset's `train` tree -> a short tag for data_source
MODULES = {
    "arithmetic__add_or_sub": "add_or_sub",
    "arithmetic__add_sub_multiple": "add_sub_multiple",
    "arithmetic__mul": "mul",
    "arithmetic__div": "div",
    "numbers__place_value": "place_value",
    "numbers__gcd": "gcd",
    "numbers__div_remainder": "div_remainder",
    "algebra__linear_1d": "linear_1d",
}
MAX_ANSWER_CHARS = 12


def _patch_sympy() -> None:
    importlib.import_module("sympy.solvers.diophantine")
    mod = sys.modules["sympy.solvers.diophantine"]
    if not hasattr(mod, "base_solution_linear"):
        from sympy.solvers.diophantine.diophantine import base_solution_linear

        mod.base_solution_linear = base_solution_linear


def _easy(range_: tuple[float, float]) -> tuple[float, float]:
    """The first third of a module's entropy range: mathematics_dataset's `train-easy`."""
    lo, hi = range_
    return lo, lo + (hi - lo) / 3


def _easiest(range_: tuple[float, float]) -> tuple[float, float]:
    """Half a range's width below `train-easy`'s lower end (clamped at 0): one-digit operands, small numbers."""
    lo, hi = range_
    return max(0.0, lo - (hi - lo) / 2), lo


DIFFICULTIES = {"easiest": _easiest, "train-easy": _easy}


def module_functions(difficulty: str = "easiest") -> dict[str, object]:
    """name -> problem generator of each module in `MODULES`, at `difficulty` (a key of `DIFFICULTIES`)."""
    _patch_sympy()
    from mathematics_dataset.modules import modules

    tree = modules.train(DIFFICULTIES[difficulty])
    out = {}
    for name in MODULES:
        node = tree
        for part in name.split("__"):
            node = node[part]
        out[name] = node
    return out


def _seed(seed: int, split: str, module: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{seed}|{split}|{module}".encode()).digest()[:4], "little")


def generate(fn, n: int, seed: int, exclude: set[str] = frozenset()) -> list[tuple[str, str]]:
    """`n` distinct (question, answer) pairs from one module, drawn under `seed` (python and numpy RNGs)."""
    import numpy as np

    random.seed(seed)
    np.random.seed(seed % 2**32)
    seen, out = set(exclude), []
    for _ in range(50 * n):
        if len(out) == n:
            break
        p = fn()
        q, a = str(p.question).strip(), str(p.answer).strip()
        if q in seen or len(a) > MAX_ANSWER_CHARS:
            continue
        seen.add(q)
        out.append((q, a))
    return out


def rows(split: str, n_total: int, seed: int, exclude: set[str] = frozenset(),
         difficulty: str = "easiest") -> list[dict]:
    """`n_total` problems in equal shares over `MODULES`, interleaved module by module."""
    fns = module_functions(difficulty)
    per = -(-n_total // len(MODULES))
    by_module = {m: generate(fns[m], per, _seed(seed, split, m), exclude) for m in MODULES}
    out = []
    for i in range(per):
        for m, tag in MODULES.items():
            if i < len(by_module[m]) and len(out) < n_total:
                q, a = by_module[m][i]
                out.append({"prompt": q, "answer": a, "data_source": f"mathematics_dataset/{tag}",
                            "extra_info": {"module": m, "index": i}})
    return out


def write(out_dir: Path, seed: int, n_train: int, n_eval: int, difficulty: str = "easiest") -> tuple[Path, Path]:
    train = rows("train", n_train, seed, difficulty=difficulty)
    heldout = rows("heldout", n_eval, seed, exclude={r["prompt"] for r in train}, difficulty=difficulty)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = out_dir / "train.jsonl", out_dir / "heldout.jsonl"
    for path, data in zip(paths, (train, heldout)):
        path.write_text("".join(json.dumps(r) + "\n" for r in data))
    return paths


def main(argv: list[str] | None = None) -> None:
    if os.environ.get("PYTHONHASHSEED") != "0":  # see the module docstring
        args = sys.argv[1:] if argv is None else argv
        os.execve(sys.executable, [sys.executable, os.path.abspath(__file__), *args],
                  {**os.environ, "PYTHONHASHSEED": "0"})
    if importlib.util.find_spec("mathematics_dataset") is None:
        raise SystemExit("mathematics_dataset is not installed: bash scripts/setup.sh --real (or pip install "
                         "mathematics-dataset)")
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="runs/smollm2_math/data", help="folder for train.jsonl and heldout.jsonl")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--train", type=int, default=2000, help="training problems")
    p.add_argument("--eval", type=int, default=300, help="held-out problems")
    p.add_argument("--difficulty", choices=sorted(DIFFICULTIES), default="easiest",
                   help="easiest: below the package's train-easy split (the recipe's); train-easy: its easiest third")
    args = p.parse_args(argv)
    for path in write(Path(args.out), args.seed, args.train, args.eval, args.difficulty):
        print(f"{sum(1 for _ in open(path))} problems -> {path}")


if __name__ == "__main__":
    main()
