"""The two pools of segment rollout.

`UnfinishedPool`: samples whose decoding stopped at a segment cap; they continue,
from their full prefix, in the next rollout round.

`ExperiencePool`: finished samples. A group (the G answers to one prompt draw)
becomes *complete* only when all G members are finished (GRPO needs the whole
group); complete groups are handed to `collect_batch` (`ulorl.rollout.collect`), which
filters them (dynamic sampling) and admits the survivors to a FIFO of trainable groups.
It takes a fixed number of groups per update; leftovers wait in FIFO order.

Both pools serialise to plain dicts (JSON), for exact resume.
"""

from __future__ import annotations

from collections import OrderedDict

from ulorl.trajectory import Trajectory


class UnfinishedPool:
    def __init__(self) -> None:
        self._items: list[Trajectory] = []

    def __len__(self) -> int:
        return len(self._items)

    def add(self, traj: Trajectory) -> None:
        if traj.finished:
            raise ValueError(f"{traj.sample_id} is finished ({traj.stop_reason}); it belongs in the experience pool")
        self._items.append(traj)

    def take_all(self) -> list[Trajectory]:
        items, self._items = self._items, []
        return items

    def items(self) -> list[Trajectory]:
        return list(self._items)

    def to_dict(self) -> dict:
        return {"items": [t.to_dict() for t in self._items]}

    @classmethod
    def from_dict(cls, d: dict) -> "UnfinishedPool":
        pool = cls()
        pool._items = [Trajectory.from_dict(t) for t in d["items"]]
        return pool


class ExperiencePool:
    def __init__(self, group_size: int) -> None:
        if group_size < 1:
            raise ValueError(f"group_size must be >= 1, got {group_size}")
        self.group_size = group_size
        self._pending: OrderedDict[str, list[Trajectory]] = OrderedDict()  # incomplete groups
        self._ready: list[list[Trajectory]] = []  # admitted groups, FIFO

    def add(self, traj: Trajectory) -> list[Trajectory] | None:
        """Add a finished sample; return its group once all G members are finished."""
        if not traj.finished:
            raise ValueError(f"{traj.sample_id} is not finished (stop reason {traj.stop_reason})")
        members = self._pending.setdefault(traj.group_id, [])
        if any(m.sample_id == traj.sample_id for m in members):
            raise ValueError(f"{traj.sample_id} was added to the experience pool twice")
        members.append(traj)
        if len(members) == self.group_size:
            del self._pending[traj.group_id]
            return sorted(members, key=lambda t: t.sample_id)
        return None

    def admit(self, group: list[Trajectory]) -> None:
        """Queue a complete, filtered group for training."""
        self._ready.append(group)

    def num_ready(self) -> int:
        return len(self._ready)

    def num_pending_samples(self) -> int:
        return sum(len(g) for g in self._pending.values())

    def num_samples(self) -> int:
        return self.num_pending_samples() + sum(len(g) for g in self._ready)

    def take(self, n_groups: int) -> list[list[Trajectory]]:
        """Pop the `n_groups` oldest admitted groups (FIFO)."""
        if n_groups > len(self._ready):
            raise ValueError(f"asked for {n_groups} groups, only {len(self._ready)} ready")
        out, self._ready = self._ready[:n_groups], self._ready[n_groups:]
        return out

    def to_dict(self) -> dict:
        return {
            "group_size": self.group_size,
            "pending": {gid: [t.to_dict() for t in ms] for gid, ms in self._pending.items()},
            "ready": [[t.to_dict() for t in g] for g in self._ready],
        }

    @classmethod
    def from_dict(cls, d: dict) -> "ExperiencePool":
        pool = cls(d["group_size"])
        for gid, ms in d["pending"].items():
            pool._pending[gid] = [Trajectory.from_dict(t) for t in ms]
        pool._ready = [[Trajectory.from_dict(t) for t in g] for g in d["ready"]]
        return pool
