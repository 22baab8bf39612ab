"""`ulorl show RUN [--step N]`: what the model wrote at one training step, from the run's samples.jsonl.

Samples are printed group by group (problem, ground truth, status), each with its
reward, length, stop reason, number of segments, the policy version of each segment
and the decoded response text (as recorded: `logging.sample_text_chars` bounds it; a member whose recorded text
and length equal an earlier member's is shown as that member's, as the samples of a problem the policy writes
surely often are).
A step's lines include the groups dynamic sampling dropped while that step's batch
was being filled (`--status` selects).
"""

from __future__ import annotations

import argparse
import json
import textwrap
from pathlib import Path

from ulorl.data.formats import check_regular_file
from ulorl.data.records import counted
from ulorl.errors import UlorlError
from ulorl.run.samples_log import clip_text

STATUSES = ("all", "trained", "dropped", "skipped")


def add_show_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument("run", help="run folder of `ulorl train` (or its samples.jsonl)")
    parser.add_argument("--step", type=int, default=None, help="training step (default: the last one logged)")
    parser.add_argument("--status", default="all", choices=STATUSES, help="which samples (default: all)")
    parser.add_argument("--limit", type=int, default=8, help="at most this many groups (0: all)")
    parser.add_argument("--chars", type=int, default=600,
                        help="characters of each response shown, start and end kept (0: no text, -1: as recorded)")
    return parser


MAX_LINE_BYTES = 64 * 2**20  # longer lines are skipped as malformed


def read_samples(run: str | Path) -> list[dict]:
    """The valid lines of a run's samples.jsonl (`run` is the run folder or the file).

    A line that is not a JSON object with an integer `step` and string `group_id` and `sample_id` (a torn
    last line, bytes that are not UTF-8, a list, `"step": "1"`) is skipped; how many, and the first one by
    line number, is printed."""
    path = _samples_path(run)
    records, skipped = read_jsonl_records(path, _sample_problem)
    if skipped and not records:  # not a run's samples (another JSONL file), or only a torn line so far
        hint = "" if Path(run).is_dir() else "; give the folder of a `ulorl train` run or its samples.jsonl"
        raise ShowError(f"{path}: no sample of a `ulorl train` run in it ({skipped}){hint}")
    if skipped:
        print(skipped)
    return records


def _samples_path(run: str | Path) -> Path:
    path = Path(run)
    if path.is_dir():
        from ulorl.run.sft import sft_run_model

        if not (path / "samples.jsonl").exists() and (model := sft_run_model(path)) is not None:
            raise FileNotFoundError(f"{run}: a `ulorl sft` run, which trains on worked solutions and logs no "
                                    f"samples; `ulorl eval --model {model}` samples its model")
        path = path / "samples.jsonl"
    if not path.exists():
        raise FileNotFoundError(f"{path}: not found (give the folder of a `ulorl train` run or its samples.jsonl)")
    check_regular_file(path)
    return path


def _sample_problem(rec: object) -> str | None:
    if not isinstance(rec, dict):
        return f"a JSON {type(rec).__name__}, not an object"
    if not isinstance(rec.get("step"), int) or isinstance(rec.get("step"), bool):
        return f"'step' is {rec.get('step')!r}, not an integer"
    for key in ("group_id", "sample_id"):
        if not isinstance(rec.get(key), str):
            return f"{key!r} is {rec.get(key)!r}, not a string"
    return None


def read_jsonl_records(path: Path, problem) -> tuple[list[dict], str]:
    """(records, note): the lines of `path` that parse as JSON and for which `problem(record)` is None; the note
    counts the others and names the first (file:line and why), or is empty."""
    out, bad, first = [], 0, ""
    with open(path, "rb") as f:
        for n, raw in _bounded_lines(f, MAX_LINE_BYTES):
            if raw is not None and not raw.strip():
                continue
            why = None
            if raw is None:
                why = f"longer than {MAX_LINE_BYTES} bytes"
            else:
                try:
                    rec = json.loads(raw.decode("utf-8"))
                    why = problem(rec)
                except UnicodeDecodeError:
                    why = "bytes that are not UTF-8"
                except (json.JSONDecodeError, RecursionError):
                    why = "not JSON (a torn line?)"
            if why is None:
                out.append(rec)
            else:
                bad += 1
                first = first or f"{path}:{n}: {why}"
    return out, (f"skipped {bad} malformed line(s) of {path} (first: {first})" if bad else "")


def _bounded_lines(f, limit: int):
    """(line number, bytes) of each line of the binary file `f`; None for a line over `limit` bytes, which is
    skipped without holding it in memory."""
    n = 0
    while True:
        raw = f.readline(limit + 1)
        if not raw:
            return
        n += 1
        if len(raw) > limit and not raw.endswith(b"\n"):
            while (rest := f.readline(limit)) and not rest.endswith(b"\n"):
                pass
            yield n, None
        else:
            yield n, raw


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
    lines = [f"step {step}: {counted(len(rows), 'sample')} in {counted(len(groups), 'group')} (" +
             ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) + ")"]
    shown = list(groups.items())[: limit or None]
    for gid, members in shown:
        first = members[0]
        rewards = ["none" if "reward_failure" in m else "?" if m.get("reward") is None else f"{m['reward']:g}"
                   for m in members]
        reason = f" ({first['reason']})" if first.get("reason") else ""
        lines.append("")
        lines.append(f"group {gid}  prompt {first.get('prompt_id')}  source {first.get('data_source', '?')}  "
                     f"ground truth {first.get('ground_truth', '?')!r}  {first['status']}{reason}  rewards "
                     f"[{', '.join(rewards)}]")
        first_with_text: dict[tuple, str] = {}  # (recorded text, length) -> the first member that wrote it
        for m in members:
            versions = ",".join(str(v) for v in m.get("versions", []))
            reward = "?" if m.get("reward") is None else f"{m['reward']:.3f}"
            if "reward_failure" in m:  # its function raised or timed out: no reward was computed
                reward = f"none ({m['reward_failure']})"
            lines.append(f"  {m['sample_id']}  reward {reward}  length {m.get('response_length')}  stop "
                         f"{m.get('stop_reason')}  segments {m.get('num_segments')} (versions {versions})")
            if chars and "response" in m:
                same = first_with_text.setdefault((m["response"], m.get("response_length")), m["sample_id"])
                if same != m["sample_id"]:
                    lines.append(f"    | (the same recorded text as {same})")
                    continue
                text = m["response"] if chars < 0 else clip_text(m["response"], chars)
                lines.append(textwrap.indent(text.rstrip() or "(empty response)", "    | "))
            elif chars and "response" not in m:
                lines.append("    (no text recorded: logging.sample_text_chars was 0, or the run predates it)")
    if len(groups) > len(shown):
        lines.append(f"\n... {counted(len(groups) - len(shown), 'more group')} (--limit 0 shows all)")
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


class ShowError(UlorlError):
    """`ulorl show` was asked for something the run does not have."""


def run_show(args: argparse.Namespace) -> int:
    if args.limit < 0:  # a slice would show all groups but that many
        raise ShowError(f"--limit {args.limit}: give a number of groups, or 0 for all")
    if args.chars < -1:  # it was taken as -1
        raise ShowError(f"--chars {args.chars}: give a number of characters, 0 for no text or -1 for all recorded")
    records = read_samples(args.run)
    if not records:
        print(f"{args.run}: samples.jsonl is empty (no step has finished yet)")
        return 0
    steps = sorted({r["step"] for r in records})
    if args.step is not None and args.step not in steps:
        raise ShowError(f"{args.run}: no samples at step {args.step}; steps logged: {_ranges(steps)}")
    step = args.step if args.step is not None else steps[-1]
    print(format_step(records, step, args.status, args.limit, args.chars))
    return 0
