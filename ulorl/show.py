"""`ulorl show RUN [--step N]`: what the model wrote at one training step, from the run's samples.jsonl.

Samples are printed group by group (problem, ground truth, status), each with its
reward, length, stop reason, number of segments, the policy version of each segment
and the decoded response text (as recorded: `logging.sample_text_chars` bounds it).
A step's lines include the groups dynamic sampling dropped while that step's batch
was being filled (`--status` selects).
"""

from __future__ import annotations

import argparse
import json
import textwrap
from pathlib import Path

from ulorl.samples_log import clip_text

STATUSES = ("all", "trained", "dropped", "skipped")


def add_show_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument("run", help="run folder of `ulorl train` (or its samples.jsonl)")
    parser.add_argument("--step", type=int, default=None, help="training step (default: the last one logged)")
    parser.add_argument("--status", default="all", choices=STATUSES, help="which samples (default: all)")
    parser.add_argument("--limit", type=int, default=8, help="at most this many groups (0: all)")
    parser.add_argument("--chars", type=int, default=600,
                        help="characters of each response shown, start and end kept (0: no text, -1: as recorded)")
    return parser


def read_samples(run: str | Path) -> list[dict]:
    """The lines of a run's samples.jsonl (`run` is the run folder or the file); a torn last line is skipped."""
    path = Path(run)
    if path.is_dir():
        path = path / "samples.jsonl"
    if not path.exists():
        raise FileNotFoundError(f"{path}: no samples.jsonl here (give the folder of a `ulorl train` run)")
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


def format_step(records: list[dict], step: int, status: str = "all", limit: int = 8, chars: int = 600) -> str:
    """The samples of `step` as text, grouped by group id in file order."""
    rows = [r for r in records if r.get("step") == step and status in ("all", r.get("status"))]
    steps = sorted({r.get("step") for r in records})
    if not rows:
        return f"no {'' if status == 'all' else status + ' '}samples at step {step}; steps logged: " \
               f"{_ranges(steps) or 'none'}"
    groups: dict[str, list[dict]] = {}
    for r in rows:
        groups.setdefault(r["group_id"], []).append(r)
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    lines = [f"step {step}: {len(rows)} samples in {len(groups)} groups (" +
             ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) + ")"]
    shown = list(groups.items())[: limit or None]
    for gid, members in shown:
        first = members[0]
        rewards = [m.get("reward") for m in members]
        reason = f" ({first['reason']})" if first.get("reason") else ""
        lines.append("")
        lines.append(f"group {gid}  prompt {first.get('prompt_id')}  source {first.get('data_source', '?')}  "
                     f"ground truth {first.get('ground_truth', '?')!r}  {first['status']}{reason}  rewards "
                     f"[{', '.join('?' if x is None else f'{x:g}' for x in rewards)}]")
        for m in members:
            versions = ",".join(str(v) for v in m.get("versions", []))
            reward = "?" if m.get("reward") is None else f"{m['reward']:.3f}"
            lines.append(f"  {m['sample_id']}  reward {reward}  length {m.get('response_length')}  stop "
                         f"{m.get('stop_reason')}  segments {m.get('num_segments')} (versions {versions})")
            if chars and "response" in m:
                text = m["response"] if chars < 0 else clip_text(m["response"], chars)
                lines.append(textwrap.indent(text.rstrip() or "(empty response)", "    | "))
            elif chars and "response" not in m:
                lines.append("    (no text recorded: logging.sample_text_chars was 0, or the run predates it)")
    if len(groups) > len(shown):
        lines.append(f"\n... {len(groups) - len(shown)} more groups (--limit 0 shows all)")
    return "\n".join(lines)


def _ranges(steps: list[int]) -> str:
    """[1, 2, 3, 7] -> '1-3, 7'."""
    out: list[str] = []
    for s in steps:
        if out and isinstance(s, int) and out[-1].split("-")[-1].isdigit() and int(out[-1].split("-")[-1]) == s - 1:
            out[-1] = f"{out[-1].split('-')[0]}-{s}"
        else:
            out.append(str(s))
    return ", ".join(out)


def run_show(args: argparse.Namespace) -> int:
    records = read_samples(args.run)
    if not records:
        print(f"{args.run}: samples.jsonl is empty (no step has finished yet)")
        return 0
    step = args.step if args.step is not None else max(r.get("step", 0) for r in records)
    print(format_step(records, step, args.status, args.limit, args.chars))
    return 0
