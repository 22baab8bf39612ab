"""``metrics.jsonl``: the always-on metrics file of a run, its writer and its reader.

Format: one JSON object per line, ``{"step": N, "<metric>": value, ...}``, in
the order steps were logged. NaN and +-inf are written as ``null`` (JSON has no
NaN), so every line parses with any JSON reader; readers get ``None`` back.

Resume: ``JsonlLogger(path, resume_step=S)`` first rewrites the file keeping
only lines with ``step <= S`` (the steps the resumed checkpoint has seen), so
steps re-run after the checkpoint are not duplicated. Unparsable lines (a line
cut short by a crash) are dropped with a warning. ``resume_step=None`` starts
a fresh file; an existing non-empty file is moved to ``metrics.jsonl.bak``
rather than silently destroyed.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import IO, Any

from ulorl.logging.base import check_step, json_value

log = logging.getLogger(__name__)

METRICS_FILE = "metrics.jsonl"


class JsonlLogger:
    """Append one JSON line per step to ``path``, flushed after every line."""

    def __init__(self, path: str | Path, resume_step: int | None = None) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if resume_step is None:
            _start_fresh(self.path)
        else:
            truncate_after(self.path, check_step(resume_step))
        self._file: IO[str] | None = open(self.path, "a", encoding="utf-8")

    def log(self, metrics: dict[str, float], step: int) -> None:
        if self._file is None:
            raise RuntimeError(f"JsonlLogger({self.path}) is closed")
        row: dict[str, Any] = {"step": check_step(step)}
        for name, value in metrics.items():
            if name == "step":
                continue  # the step argument is authoritative
            row[name] = json_value(name, value)
        self._file.write(json.dumps(row, allow_nan=False) + "\n")
        self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def _start_fresh(path: Path) -> None:
    if path.exists() and path.stat().st_size > 0:
        backup = path.with_name(path.name + ".bak")
        log.warning("%s exists and this is not a resume; moving it to %s", path, backup)
        os.replace(path, backup)
    path.write_text("", encoding="utf-8")


def truncate_after(path: Path, step: int) -> int:
    """Rewrite ``path`` atomically keeping only lines with ``step <= step``; return lines kept."""
    if not path.exists():
        return 0
    kept: list[str] = []
    dropped = 0
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            row, why = _parse_line(line)
            if row is None:
                log.warning("%s:%d: %s", path, lineno, why)
                dropped += 1
            elif row["step"] <= step:
                kept.append(line if line.endswith("\n") else line + "\n")
            else:
                dropped += 1
    tmp = path.with_name(path.name + f".tmp-{os.getpid()}")
    tmp.write_text("".join(kept), encoding="utf-8")
    os.replace(tmp, path)
    if dropped:
        log.info("%s: resumed at step %d, dropped %d later or unparsable line(s)", path, step, dropped)
    return len(kept)


def _parse_line(line: str) -> tuple[dict[str, Any] | None, str]:
    """One parsed row and "", or None and why the line is bad."""
    try:
        row = json.loads(line)
    except json.JSONDecodeError as e:
        return None, f"skipping unparsable line ({e.msg})"
    except RecursionError:
        return None, "skipping a line nested too deeply to read"
    step = row.get("step") if isinstance(row, dict) else None
    if isinstance(step, bool) or not isinstance(step, int):
        return None, "skipping line without an integer 'step'"
    return row, ""


BAD_LINES_SHOWN = 3  # bad lines warned one by one; the rest are counted in one line


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """Read a ``metrics.jsonl`` into rows sorted by step.

    Bad lines are skipped with a warning naming file and line number (the first `BAD_LINES_SHOWN`, then one line
    with the count of the rest). When a
    step appears more than once (an old file written before resume truncation)
    the last occurrence wins. ``null`` values come back as ``None``.

    Raises:
        FileNotFoundError: ``path`` does not exist.
    """
    path = Path(path)
    by_step: dict[int, dict[str, Any]] = {}
    bad = 0
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            if not raw.strip():
                continue
            try:
                row, why = _parse_line(raw.decode("utf-8"))
            except UnicodeDecodeError:
                row, why = None, "skipping a line that is not UTF-8"
            if row is not None:
                by_step[row["step"]] = row
                continue
            bad += 1
            if bad <= BAD_LINES_SHOWN:
                log.warning("%s:%d: %s", path, lineno, why)
    if bad > BAD_LINES_SHOWN:
        log.warning("%s: %d more bad lines skipped (%d in all)", path, bad - BAD_LINES_SHOWN, bad)
    return [by_step[s] for s in sorted(by_step)]
