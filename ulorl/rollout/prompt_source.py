"""PromptSource: new prompt draws for the rollout, with a resumable cursor.

Walks the dataset in a seeded permutation per epoch; when it runs out mid-draw it
wraps to the next epoch (re-shuffled with `seed + epoch`), so a step never fails
because the dataset ended. Each draw gets a fresh group id `g<counter>`. The state
(cursor, epoch, counter) is three integers, saved in checkpoints together with the
dataset's size and a fingerprint of its content (prompt ids, tokens, answers) and
the shuffle settings, so a checkpoint is never resumed on different data.

Epoch boundaries need no special case: a cursor at the end of the data (a
checkpoint taken exactly at an epoch boundary) simply starts the next epoch on the
next draw, so a resumed run never "finishes" an epoch it has already finished.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np


@dataclass
class PromptDraw:
    group_id: str
    record: object  # a ulorl.data.PromptRecord (prompt_id, prompt_tokens, ground_truth, data_source, ...)
    epoch: int


class PromptSource:
    def __init__(self, records: list, seed: int = 0, shuffle: bool = True) -> None:
        if not records:
            raise ValueError("the training dataset is empty: nothing to draw prompts from")
        self.records = records
        self.seed = seed
        self.shuffle = shuffle
        self.cursor = 0
        self.epoch = 0
        self.counter = 0
        self._order = self._permutation(0)
        self._fingerprint: str | None = None

    def fingerprint(self) -> str:
        """sha256 of the records' ids, prompt tokens and answers, in dataset order (computed once)."""
        if self._fingerprint is None:
            h = hashlib.sha256()
            for r in self.records:
                h.update(f"{getattr(r, 'prompt_id', '')}\x00{getattr(r, 'ground_truth', '')}\x00".encode())
                h.update(np.asarray(getattr(r, "prompt_tokens", []), dtype=np.int64).tobytes())
            self._fingerprint = h.hexdigest()
        return self._fingerprint

    def _permutation(self, epoch: int) -> np.ndarray:
        if not self.shuffle:
            return np.arange(len(self.records))
        return np.random.default_rng([self.seed, epoch]).permutation(len(self.records))

    def next(self, n: int) -> list[PromptDraw]:
        out = []
        for _ in range(n):
            if self.cursor >= len(self.records):
                self.epoch += 1
                self.cursor = 0
                self._order = self._permutation(self.epoch)
            rec = self.records[int(self._order[self.cursor])]
            out.append(PromptDraw(group_id=f"g{self.counter}", record=rec, epoch=self.epoch))
            self.cursor += 1
            self.counter += 1
        return out

    def state_dict(self) -> dict:
        return {"cursor": self.cursor, "epoch": self.epoch, "counter": self.counter, "num_records": len(self.records),
                "fingerprint": self.fingerprint(), "seed": self.seed, "shuffle": self.shuffle}

    def load_state_dict(self, state: dict) -> None:
        if state["num_records"] != len(self.records):
            raise ValueError(
                f"checkpoint was made with {state['num_records']} training prompts, the dataset now has "
                f"{len(self.records)}: refusing to resume on different data"
            )
        if state.get("fingerprint", self.fingerprint()) != self.fingerprint():
            raise ValueError("the training prompts differ from those the checkpoint was made with (same count, "
                             "different content): refusing to resume on different data")
        if (state.get("seed", self.seed), state.get("shuffle", self.shuffle)) != (self.seed, self.shuffle):
            raise ValueError(f"checkpoint was made with prompt order seed={state.get('seed')} "
                             f"shuffle={state.get('shuffle')}, now seed={self.seed} shuffle={self.shuffle}: the "
                             "saved cursor would point into a different order; refusing to resume on different data")
        if not 0 <= state["cursor"] <= len(self.records):
            raise ValueError(f"checkpoint cursor {state['cursor']} is outside the {len(self.records)} prompts")
        self.cursor, self.epoch, self.counter = state["cursor"], state["epoch"], state["counter"]
        self._order = self._permutation(self.epoch)
