"""Process helpers for tests that watch other processes die (Linux /proc)."""

from __future__ import annotations

from pathlib import Path


def running(pid: int) -> bool:
    """Neither gone nor a zombie that nobody has reaped yet."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"
