"""`samples.jsonl`: one line per sample when it is trained or dropped.

Each line: sample id, prompt id, group id, step, number of segments and their
policy versions, response length, stop reason, reward, status (`trained` |
`dropped`) and why it was dropped. Users audit their data with it; the resume
tests use it to prove no sample is lost or trained twice. On resume, lines written
after the checkpoint's step are removed so the file stays exact.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from ulorl.trajectory import Trajectory


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
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(k + "\n" for k in keep))
    os.replace(tmp, path)


class SampleLog:
    def __init__(self, path: str | Path, resume_step: int | None = None) -> None:
        self.path = Path(path)
        if resume_step is not None:
            truncate_jsonl_after(self.path, resume_step)
        elif self.path.exists():
            self.path.unlink()
        self._f = open(self.path, "a")

    def write(self, trajs: list[Trajectory], step: int, status: str, reason: str | None = None) -> None:
        for t in trajs:
            rec = {"sample_id": t.sample_id, "prompt_id": t.prompt_id, "group_id": t.group_id, "step": step,
                   "num_segments": len(t.segments), "versions": t.versions(), "response_length": t.response_len,
                   "stop_reason": t.stop_reason, "reward": t.reward, "status": status, "reason": reason}
            self._f.write(json.dumps(rec) + "\n")
        self._f.flush()

    def close(self) -> None:
        self._f.close()
