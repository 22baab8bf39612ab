"""Build and score the verifier's pair set: real dataset ground truths against model-style answers.

Two datasets that ship on PyPI (nothing is downloaded from a hub):

- CHAMP (``pip install champ-dataset``): 270 competition problems whose ground
  truths are written in words ("98 values", "C(10, 5), or equivalently 252",
  "3 is the only possible value", "2^(n-1)"). For the problems in ``CHAMP``
  below we wrote by hand the final answer a model would give, once right and
  once wrong (the wrong one is a plausible slip: off by one, the other yes/no,
  a wrong exponent).
- DeepMind's mathematics generator (``pip install mathematics-dataset``; it
  needs two compatibility shims for current sympy and numpy, applied below):
  ground truths in sympy syntax (``1840*n**3``, ``sqrt(3)``, ``4/665``). The
  right answer is the ground truth as a model writes it: sympy's LaTeX printer
  (``1840 n^{3}``) or the ground truth with ``^`` and implicit products
  (``1840n^3``), alternating; the wrong answer is the ground truth plus one (or the next
  option, the other truth value, a changed list), checked with sympy to
  differ.

Each pair is one JSONL row: ``source``, ``id``, ``response`` (the end of a
model response, with the answer boxed or after "Answer:"), ``ground_truth``,
``data_source``, ``label`` (``correct`` / ``wrong``).

    python benchmarks/verifier_pairs.py build   # writes tests/reward/data/verifier_pairs.jsonl
    python benchmarks/verifier_pairs.py score   # scores it with RuleVerifier, prints the shares (JSON last)

The committed file is what ``tests/reward/test_pairs.py`` checks; the
figures are reported in ``docs/rewards.md``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import random
import re
import sys
import types
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "tests" / "reward" / "data" / "verifier_pairs.jsonl"

# problem id -> (a right final answer, a wrong one), written as a model writes them
CHAMP = {
    "P_Combinatorics_1": ("239", "240"),
    "P_Combinatorics_2": ("\\binom{10}{5}", "\\binom{10}{4} + 1"),
    "P_Combinatorics_4": ("76", "64"),
    "P_Combinatorics_6": ("2^{n-1}", "2^{n}"),
    "P_Combinatorics_9": ("n", "n-1"),
    "P_Combinatorics_11": ("\\frac{n(n-3)}{2}", "\\frac{n(n-1)}{2}"),
    "P_Combinatorics_12": ("(n+1)^{n-1}", "n^{n-2}"),
    "P_Combinatorics_13": ("4^n", "2^{2n+1}"),
    "P_Combinatorics_14": ("\\frac{5}{14}", "\\frac{5}{12}"),
    "P_Combinatorics_16": ("\\binom{n+1}{2m+1}", "\\binom{n}{2m}"),
    "P_Combinatorics_17": ("\\text{No}", "\\text{Yes}"),
    "P_Combinatorics_18": ("5{,}050", "5{,}000"),
    "P_Combinatorics_19": ("n(n+1)2^{n-2}", "n(n+1)2^{n-1}"),
    "P_Combinatorics_22": ("\\frac{n+1}{r+1}", "\\frac{n}{r}"),
    "P_Combinatorics_23": ("\\frac{4^n+2^n}{2}", "\\frac{4^n}{2}"),
    "P_Combinatorics_25": ("n!", "(n-1)!"),
    "P_Combinatorics_27": ("504", "252"),
    "P_Combinatorics_29": ("\\binom{n}{4}", "\\binom{n}{3}"),
    "P_Combinatorics_30": ("2,001,000", "2,000,000"),
    "P_Combinatorics_33": ("\\left(\\frac{n(n+1)}{2}\\right)^2", "\\frac{n(n+1)}{2}"),
    "P_Combinatorics_34": ("(n-k+3)\\cdot 2^{n-k-2}", "(n-k+2)\\cdot 2^{n-k-2}"),
    "P_Combinatorics_35": ("\\frac{(2n)!}{2^n n!}", "\\frac{(2n)!}{n!}"),
    "P_Combinatorics_36": ("\\frac{n!}{2n}", "\\frac{n!}{n}"),
    "P_Combinatorics_37": ("\\frac{n(n+1)(2n+1)}{6}", "\\frac{n(n+1)}{2}"),
    "P_Inequality_1": ("[-1, 1]", "(-1, 1)"),
    "P_Inequality_2": ("\\frac{1}{2}", "\\frac{1}{3}"),
    "P_Inequality_6": ("\\text{no}", "\\text{yes}"),
    "P_Inequality_11": ("2^n", "2^{n+1}"),
    "P_Inequality_13": ("-9", "9"),
    "P_Inequality_14": ("100", "99"),
    "P_Inequality_16": ("\\frac32", "\\frac23"),
    "P_Inequality_17": ("1-\\frac{1}{\\sqrt[n]{2}}", "1-\\frac{1}{2^n}"),
    "P_Inequality_18": ("\\frac{\\sqrt{3}}{3}", "\\sqrt{3}"),
    "P_Inequality_19": ("2 \\text{ inequalities}", "3 \\text{ inequalities}"),
    "P_Inequality_21": ("\\frac{1}{n+1}", "\\frac{1}{n}"),
    "P_Inequality_29": ("2^{m+1}", "2^{m}"),
    "P_Inequality_30": ("\\frac{n}{n-1}", "\\frac{n-1}{n}"),
    "P_Inequality_31": ("\\frac{n^2}{n-1}", "\\frac{n^2}{n+1}"),
    "P_Inequality_33": ("98", "99"),
    "P_Inequality_34": ("\\sqrt{2}", "\\sqrt{3}"),
    "P_Inequality_35": ("900", "899"),
    "P_Inequality_40": ("2", "1"),
    "P_Inequality_41": ("\\frac{2^n}{n+1}", "\\frac{2^n}{n}"),
    "P_Inequality_46": ("\\frac1n", "\\frac{1}{n^2}"),
    "P_Number-Theory_4": ("x=6, y=5", "x=5, y=6"),
    "P_Number-Theory_5": ("9376", "9375"),
    "P_Number-Theory_11": ("7125", "7215"),
    "P_Number-Theory_17": ("7744", "7444"),
    "P_Number-Theory_19": ("0", "1"),
    "P_Number-Theory_25": ("3", "2"),
    "P_Number-Theory_28": ("n", "n+1"),
    "P_Number-Theory_33": ("512", "256"),
    "P_Number-Theory_36": ("1, 19", "1, 17"),
    "P_Number-Theory_50": ("21978", "21987"),
    "P_Number-Theory_51": ("1176470588235294", "1176470588235295"),
    "P_Number-Theory_53": ("1, 4, 9", "1, 4, 9, 16"),
    "P_Number-Theory_54": ("0", "2"),
    "P_Number-Theory_60": ("3", "5"),
    "P_Number-Theory_76": ("2178", "1089"),
    "P_Polynomial_7": ("-2x+2", "2x-2"),
    "P_Polynomial_12": ("0", "1"),
    "P_Polynomial_13": ("a=3, b=-4", "a=-3, b=4"),
    "P_Polynomial_14": ("(x^2+x+1)(x^2-x+1)", "(x^2+1)^2"),
    "P_Polynomial_19": ("(x+y+z)(x^2+y^2+z^2-xy-yz-zx)", "(x+y+z)^3"),
    "P_Polynomial_22": ("x = \\pm 1", "x = 1"),
    "P_Polynomial_26": ("-3", "3"),
    "P_Polynomial_31": ("\\frac{a^3+2b}{3a}", "\\frac{a^3-2b}{3a}"),
    "P_Polynomial_37": ("x=16, x=81", "x=16, x=64"),
    "P_Polynomial_39": ("x^3-1", "x^3+1"),
    "P_Polynomial_41": ("890", "889"),
    "P_Polynomial_47": ("120", "24"),
    "P_Sequence_7": ("3", "\\frac{3}{2}"),
    "P_Sequence_8": ("\\frac{1}{18}", "\\frac{1}{8}"),
    "P_Sequence_14": ("2", "\\infty"),
    "P_Sequence_16": ("\\sqrt{a}", "a"),
    "P_Sequence_21": ("2{,}500", "2{,}499"),
    "P_Sequence_23": ("-\\frac12", "\\frac12"),
    "P_Sequence_29": ("\\frac{2}{3}", "\\frac{3}{2}"),
    "P_Sequence_30": ("\\frac{a+3b}{2}", "\\frac{a+b}{2}"),
    "P_Sequence_31": ("4", "2"),
    "P_Sequence_34": ("2^{997}", "2^{996}"),
    "P_Sequence_35": ("1000", "999"),
    "P_Sequence_41": ("\\frac{1+\\sqrt{4a+1}}{2}", "\\frac{1-\\sqrt{4a+1}}{2}"),
    "P_Sequence_42": ("601", "600"),
    "P_Sequence_44": ("\\text{Exactly one sequence}", "\\text{Infinitely many sequences}"),
}

# how a model ends its response; the answer's place is {}
TEMPLATES = [
    "Putting the cases together, the final answer is $\\boxed{{{}}}$.",
    "Hence the answer is \\boxed{{{}}}",
    "So we conclude.\n\nFinal Answer: ${}$",
    "Therefore:\n\n$$\\boxed{{{}}}$$",
]


def champ_pairs() -> list[dict]:
    import champ_dataset

    data = json.loads((Path(champ_dataset.__file__).parent / "dataset_files" / "v0.json").read_text())
    rows = []
    for k, (pid, (right, wrong)) in enumerate(CHAMP.items()):
        gold = data["problems"][pid]["_answer"]
        for label, ans in (("correct", right), ("wrong", wrong)):
            rows.append({"source": "champ", "id": pid, "response": TEMPLATES[k % len(TEMPLATES)].format(ans),
                         "ground_truth": gold, "data_source": "champ", "label": label})
    return rows


def _deepmind_modules():
    """The generator's training modules, patched for sympy >= 1.6 and numpy >= 2 (the package dates from 2019)."""
    import numpy as np

    dio = importlib.import_module("sympy.solvers.diophantine.diophantine")
    sys.modules["sympy.solvers.diophantine"].base_solution_linear = dio.base_solution_linear
    from mathematics_dataset.sample import polynomials

    class _Array(np.ndarray):
        def itemset(self, index, value):  # removed in numpy 2
            self[index] = value

    shim = types.ModuleType("numpy_shim")
    shim.__dict__.update(vars(np))
    shim.zeros = lambda *a, **k: np.zeros(*a, **k).view(_Array)
    shim.empty = lambda *a, **k: np.empty(*a, **k).view(_Array)
    shim.object = object
    polynomials.np = shim
    from mathematics_dataset.modules import modules

    def flat(d, prefix=""):
        for key, v in d.items():
            if isinstance(v, dict):
                yield from flat(v, prefix + key + "__")
            else:
                yield prefix + key, v

    easy = lambda r: (r[0], r[0] + (r[1] - r[0]) / 3)  # noqa: E731 - the generator's "train-easy" entropy
    return dict(flat(modules.train(easy)))


_IMPLICIT = re.compile(r"(?<=[0-9A-Za-z)])\*(?=[A-Za-z(])")


def _render(expr, plain: bool) -> str:
    """sympy's LaTeX (``1840 n^{3}``), or the sympy string with ``^`` and implicit products (``1840n^3``)."""
    import sympy

    if plain:
        return _IMPLICIT.sub("", str(expr).replace("**", "^"))
    return sympy.latex(expr)


def _deepmind_answers(gold: str, question: str, k: int) -> tuple[str, str] | None:
    """(right, wrong) model answers for a DeepMind ground truth, or None when we cannot render it safely."""
    import sympy
    from sympy.parsing.sympy_parser import parse_expr

    if gold in ("True", "False"):
        return f"\\text{{{gold}}}", "\\text{False}" if gold == "True" else "\\text{True}"
    if len(gold) == 1 and gold.isalpha() and "(a)" in question:
        options = [c for c in "abcdefg" if f"({c})" in question]
        return gold, next(c for c in options if c != gold)
    if "," in gold:  # a list: keep the order, change the last element
        items = [x.strip() for x in gold.split(",")]
        try:
            last = parse_expr(items[-1])
        except Exception:  # noqa: BLE001 - a name like "r": drop it instead
            return gold, ", ".join(items[:-1])
        return gold, ", ".join(items[:-1] + [_render(last + 1, True)])
    try:
        expr = parse_expr(gold, evaluate=False)
        value = parse_expr(gold)
    except Exception:  # noqa: BLE001
        return None
    wrong = value + 1
    if sympy.simplify(wrong - value) == 0:
        return None
    plain = k % 2 == 1
    right = _IMPLICIT.sub("", gold.replace("**", "^")) if plain else _render(expr, False)
    return right, _render(wrong, plain)


def deepmind_pairs(per_module: int = 4, seed: int = 0) -> list[dict]:
    import numpy as np

    random.seed(seed)
    np.random.seed(seed)
    rows, k = [], 0
    for name, fn in sorted(_deepmind_modules().items()):
        made = 0
        for _ in range(per_module * 3):
            if made == per_module:
                break
            problem = fn()
            gold, question = str(problem.answer), str(problem.question)
            answers = _deepmind_answers(gold, question, k)
            if answers is None:
                continue
            for label, ans in zip(("correct", "wrong"), answers):
                rows.append({"source": "deepmind", "id": f"{name}/{made}", "response":
                             TEMPLATES[k % len(TEMPLATES)].format(ans), "ground_truth": gold,
                             "data_source": "deepmind", "label": label})
            made += 1
            k += 1
    return rows


def build(out: Path) -> None:
    rows = champ_pairs() + deepmind_pairs()
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    print(f"wrote {len(rows)} pairs to {out}")


def score(path: Path, num_workers: int = 2) -> dict:
    """Scores every pair with RuleVerifier; returns the shares by source and label, and the misjudged pairs."""
    from ulorl.reward import RuleVerifier

    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    with RuleVerifier(timeout_s=10.0, num_workers=num_workers) as v:
        verdicts = v.score_detailed([r["response"] for r in rows], [r["ground_truth"] for r in rows],
                                    [r["data_source"] for r in rows])
    report: dict = {"pairs": len(rows), "by_source": {}, "misjudged": []}
    for r, verdict in zip(rows, verdicts, strict=True):
        accepted = verdict.score > 0.5
        s = report["by_source"].setdefault(r["source"], {"correct": 0, "correct_accepted": 0,
                                                         "wrong": 0, "wrong_rejected": 0})
        s[r["label"]] += 1
        if r["label"] == "correct":
            s["correct_accepted"] += accepted
        else:
            s["wrong_rejected"] += not accepted
        if accepted != (r["label"] == "correct"):
            report["misjudged"].append({"id": r["id"], "label": r["label"], "answer": verdict.prediction,
                                        "ground_truth": r["ground_truth"]})
    tot = {k: sum(s[k] for s in report["by_source"].values())
           for k in ("correct", "correct_accepted", "wrong", "wrong_rejected")}
    report["correct_accepted_share"] = tot["correct_accepted"] / max(tot["correct"], 1)
    report["wrong_rejected_share"] = tot["wrong_rejected"] / max(tot["wrong"], 1)
    report["totals"] = tot
    return report


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("command", choices=["build", "score"])
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args()
    if args.command == "build":
        build(args.out)
    else:
        report = score(args.out)
        for m in report["misjudged"]:
            print("misjudged:", m)
        print(json.dumps({k: v for k, v in report.items() if k != "misjudged"}))


if __name__ == "__main__":
    main()
