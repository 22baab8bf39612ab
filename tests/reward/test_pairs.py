"""The verifier on real ground truths: the committed pair set (benchmarks/verifier_pairs.py built it).

Targets from issue 18: every wrong pair rejected, at least 95% of correct pairs accepted."""

import json
from pathlib import Path

from ulorl.reward import RuleVerifier

PAIRS = Path(__file__).parent / "data" / "verifier_pairs.jsonl"


def test_pair_set_targets():
    rows = [json.loads(line) for line in PAIRS.read_text().splitlines() if line.strip()]
    assert {r["source"] for r in rows} == {"champ", "deepmind"} and len(rows) >= 600
    with RuleVerifier(timeout_s=10.0, num_workers=2) as v:
        scores = v.score([r["response"] for r in rows], [r["ground_truth"] for r in rows],
                         [r["data_source"] for r in rows])
    correct = [s > 0.5 for r, s in zip(rows, scores) if r["label"] == "correct"]
    wrongly_accepted = [r["id"] for r, s in zip(rows, scores) if r["label"] == "wrong" and s > 0.5]
    assert wrongly_accepted == []
    assert sum(correct) / len(correct) >= 0.95, f"{sum(correct)}/{len(correct)} correct pairs accepted"
