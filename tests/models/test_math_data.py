"""examples/mathematics_data.py: DeepMind's mathematics_dataset problems as JSONL, the same bytes for the same
seed, held-out disjoint from training. Skipped when mathematics_dataset is not installed (the `real` extra)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(importlib.util.find_spec("mathematics_dataset") is None,
                                reason="needs mathematics-dataset (pip install 'ulorl[real]')")
SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "mathematics_data.py"


def write(out: Path, seed: int) -> list[bytes]:
    subprocess.run([sys.executable, str(SCRIPT), "--out", str(out), "--seed", str(seed), "--train", "30",
                    "--eval", "20"], check=True, capture_output=True)
    return [(out / n).read_bytes() for n in ("train.jsonl", "heldout.jsonl")]


def test_same_seed_same_bytes_heldout_disjoint(tmp_path):
    a, b, c = write(tmp_path / "a", 0), write(tmp_path / "b", 0), write(tmp_path / "c", 1)
    assert a == b and a != c
    train, heldout = ([json.loads(line) for line in f.decode().splitlines()] for f in a)
    assert len(train) == 30 and len(heldout) == 20
    assert not {r["prompt"] for r in train} & {r["prompt"] for r in heldout}
    # 8 modules in turn: the first 8 rows are one problem of each
    assert len({r["data_source"] for r in train[:8]}) == 8
    assert all(r["data_source"].startswith("mathematics_dataset/") and 0 < len(r["answer"]) <= 12 for r in train)


def test_easiest_is_below_train_easy(tmp_path):
    # the recipe's default difficulty: smaller numbers than the package's train-easy split, module by module
    def digits(rows):
        return sum(sum(c.isdigit() for c in r["prompt"]) for r in rows) / len(rows)

    for difficulty in ("easiest", "train-easy"):
        subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path / difficulty), "--train", "40", "--eval",
                        "8", "--difficulty", difficulty], check=True, capture_output=True)
    easiest, easy = ([json.loads(line) for line in (tmp_path / d / "train.jsonl").read_text().splitlines()]
                     for d in ("easiest", "train-easy"))
    assert [r["data_source"] for r in easiest] == [r["data_source"] for r in easy]
    assert digits(easiest) < digits(easy)
