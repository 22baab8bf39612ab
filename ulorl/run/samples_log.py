"""`samples.jsonl`: one line per sample when it is trained or dropped.

Each line: sample id, prompt id, group id, step, number of segments and their
policy versions, response length, stop reason, reward, ground truth, data source,
the decoded response text (`response`; `logging.sample_text_chars` keeps its first
and last characters, with the number of characters cut in the middle; 0: no text),
status and a reason:
`trained`; `dropped` (reason `all_rewards_equal`: dynamic sampling; `reward_failed`: a member's
reward function raised or timed out, and each such sample's `reward_failure` says how); `skipped`
(reason `non_finite`: the update of that step was skipped, the sample taught
nothing). Users audit their data with it; the resume tests use it to prove no
sample is lost or trained twice. On resume, lines written after the checkpoint's
step (and a line torn by a crash) are removed so the file stays exact; `sync()`
makes the lines durable before a checkpoint is committed.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

from ulorl.trajectory import Trajectory


def clip_text(text: str, max_chars: int | None) -> str:
    """`text` within `max_chars` characters: its start and its end (where the answer is), the middle cut.

    None: the whole text. The cut is marked `…[N chars cut]…` and its length is not counted in the budget."""
    if max_chars is None or len(text) <= max_chars:
        return text
    head = (max_chars + 1) // 2
    tail = max_chars - head
    return f"{text[:head]}…[{len(text) - max_chars} chars cut]…{text[len(text) - tail:] if tail else ''}"


def truncate_jsonl_after(path: Path, step: int) -> None:
    """Drop lines whose `step` is greater than `step` (and any torn last line)."""
    if not path.exists():
        return
    keep = []
    for line in path.read_text().splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line torn by a crash
        if rec.get("step", 0) <= step:
            keep.append(line)
    tmp = path.with_name(path.name + f".tmp-{os.getpid()}")
    with open(tmp, "w") as f:
        f.write("".join(k + "\n" for k in keep))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


class SampleLog:
    """`decode(token_ids) -> str` turns a response into text; `text_chars` bounds it (None: all, 0: no text)."""

    def __init__(self, path: str | Path, resume_step: int | None = None,
                 decode: Callable[[list[int]], str] | None = None, text_chars: int | None = 2000) -> None:
        self.path = Path(path)
        self.decode = decode if text_chars != 0 else None
        self.text_chars = text_chars
        if resume_step is not None:
            truncate_jsonl_after(self.path, resume_step)
        elif self.path.exists():
            self.path.unlink()
        self._f = open(self.path, "a")

    def write(self, trajs: list[Trajectory], step: int, status: str, reason: str | None = None) -> None:
        for t in trajs:
            rec = {"sample_id": t.sample_id, "prompt_id": t.prompt_id, "group_id": t.group_id, "step": step,
                   "num_segments": len(t.segments), "versions": t.versions(), "response_length": t.response_len,
                   "stop_reason": t.stop_reason, "reward": t.reward, "ground_truth": t.ground_truth,
                   "data_source": t.data_source, "status": status, "reason": reason}
            if t.reward_failure is not None:
                rec["reward_failure"] = t.reward_failure
            if self.decode is not None:
                rec["response"] = clip_text(self.decode(t.response_tokens), self.text_chars)
            self._f.write(json.dumps(rec) + "\n")
        self._f.flush()

    def sync(self) -> None:
        """Flush and fsync: lines of the steps a checkpoint covers must survive a power loss too."""
        self._f.flush()
        os.fsync(self._f.fileno())

    def close(self) -> None:
        self._f.close()
