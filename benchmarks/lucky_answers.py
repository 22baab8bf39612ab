"""Trained answers that the reward called right but that are not the worked solution: right by luck.

    python benchmarks/lucky_answers.py RUN [--config configs/long.yaml] [--out F.json]

The built-in `odometer` task's answer is one value mod 11, so an answer whose worked lines are wrong still ends
on the right value about 1 time in 11, and its reward is 1 as for a worked answer. Past the length a policy can
count to, such answers are most of its right ones, and RL then reinforces wrong lines. For every `trained` line of
RUN/samples.jsonl with reward > 0 this compares the response with the row's worked solution
(`extra_info.solution`, as the data config loads it): by bucket of solution tokens, how many right answers are
the worked solution, how many are not, and how many wrong answers there were (buckets: `by_length`'s).

`samples.jsonl` keeps a long response's start and end only (`logging.sample_text_chars`, 2,000 characters by
default): such a response counts as worked when both kept parts match the solution's, so "not worked" is a lower
bound unless the run kept whole texts (`logging.sample_text_chars=null`). The JSON says how many were cut.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections import Counter
from pathlib import Path

from benchlib import emit, machine
from reference_likelihood import LENGTH_EDGES

CUT = re.compile(r"\u2026\[\d+ chars cut\]\u2026")  # samples_log.clip_text's mark: head…[N chars cut]…tail


def is_worked(response: str, solution: str) -> tuple[bool, bool]:
    """(the response is the worked solution, as far as its kept text shows; its middle was cut)."""
    response, solution = response.strip(), solution.strip()
    parts = CUT.split(response, maxsplit=1)
    if len(parts) == 1:
        return response == solution, False
    head, tail = parts
    return solution.startswith(head) and solution.endswith(tail), True


def bucket(tokens: int) -> str:
    """The `LENGTH_EDGES` bucket of a solution of `tokens` tokens (EOS included), as `by_length` counts them."""
    for lo, hi in zip(LENGTH_EDGES, LENGTH_EDGES[1:]):
        if tokens < hi:
            return f"{lo}-{hi - 1}"
    return f"{LENGTH_EDGES[-1]}-"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", help="a run folder with samples.jsonl")
    ap.add_argument("--config", default=None, help="the run's config (default: RUN/config.yaml)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    from ulorl.config import load_run_config
    from ulorl.data import load_prompts
    from ulorl.models import load_tokenizer
    from ulorl.run.held_out import solution_tokens

    run = Path(args.run)
    load0 = os.getloadavg()
    cfg = load_run_config(args.config or str(run / "config.yaml"), [])
    tok = load_tokenizer(cfg.model.path)
    records, _ = load_prompts(cfg.data, tok, "train")
    tokens = solution_tokens(tok, records)
    if tokens is None:
        raise SystemExit(f"data.train={cfg.data.train}: a row has no worked solution (extra_info.solution), "
                         "so a right answer cannot be told from a lucky one")
    by_id = {r.prompt_id: (r.extra_info["solution"], n) for r, n in zip(records, tokens)}
    counts: dict[str, Counter] = {}
    cut = 0
    with open(run / "samples.jsonl") as f:
        for n, line in enumerate(f, 1):
            s = json.loads(line)
            if s["status"] != "trained":
                continue
            if s["prompt_id"] not in by_id or "response" not in s:
                raise SystemExit(f"{run / 'samples.jsonl'} line {n}: prompt {s['prompt_id']} is not a row of the "
                                 "config's data.train, or the line has no response text (logging.sample_text_chars=0)")
            solution, length = by_id[s["prompt_id"]]
            c = counts.setdefault(bucket(length), Counter())
            if s["reward"] > 0:
                worked, was_cut = is_worked(s["response"], solution)
                c["right_worked" if worked else "right_not_worked"] += 1
                cut += was_cut
            else:
                c["wrong"] += 1
    table = {b: dict(counts[b]) for b in sorted(counts, key=lambda b: int(b.split("-")[0]))}  # by lower edge
    for b, c in table.items():
        right = c.get("right_worked", 0) + c.get("right_not_worked", 0)
        print(f"solution tokens {b:>10}: {right:4d} right ({c.get('right_not_worked', 0)} not the worked solution), "
              f"{c.get('wrong', 0)} wrong", file=sys.stderr)
    return emit({"run": str(run), "by_solution_tokens": table, "right_answers_cut": cut, "machine": machine(load0)},
                args.out)


if __name__ == "__main__":
    raise SystemExit(main())
