"""One `generate` call: the waiting queue, the running rows, admission, preemption and retirement.

Each step samples one token for every running row, retires the rows that finished (EOS or their
`max_new_tokens`), makes room for the remaining rows' next token, decodes them in one batch, and admits
waiting sequences while rows and blocks allow. Admission:

- a sequence is admitted when a row is free (`max_batch`) and the pool has the blocks of its context plus
  one block of headroom per other running row (so an admitted row is not preempted at the next step; a
  sequence alone always fits, `kv_cache.check_budget`);
- consecutive fresh sequences with the same prefix (the G samples of a group) are admitted together and
  their prefix is prefilled once: its full blocks are shared (reference counts), its last, partial block
  is copied per sample, and the samples start from the same next-token logits;
- prefill is packed, up to `prefill_tokens` tokens per step (at least one sequence).

Runs (CPU): a sequence prefilled alone with at least `run_min_blocks` full blocks takes its blocks from the
top of the pool, where they are usually consecutive; then the decode attention reads them as one view (one
call per such row, at the speed of an attention over contiguous memory), and only the blocks it grows into
(taken from the bottom) as entries of the batched call, whose range ends below the top.

Compaction: rows that finish leave holes among the blocks in use, and the decode attention reads every
block below the pool's high-water mark; when the holes pass a quarter of it, the blocks above the used count
move into them (one copy), so the attention's work follows the live tokens again.

Preemption: when the pool cannot hold the next token of every running row, the newest rows are preempted:
their blocks are freed, and they go back to the front of the queue with their tokens and log-probs so far,
to be prefilled again (`prefix + tokens`) when blocks free up. Nothing is dropped, and because each row
samples from its own random stream (`sampler.py`) the tokens are those of an unconstrained run.

Kept rows (`kept_rows.py`): with `keep`, a row that stops at `max_new` (not at EOS) keeps its blocks when the
call ends, for a next call that continues it under the same weights; such a row starts the next call in the
running batch, its last token fed by the first decode step, with no prefill. On CPU a resumed row long enough
for a run has its blocks copied into one at the top of the pool, and the blocks below are compacted: the layout a
prefill would have given. While the call runs, the rows it keeps are released (newest first) whenever blocks are
short, before any running row is preempted.

Decode goes through the split-K plan (`attention.py`, the CPU path: compaction and runs serve it), or, when the
engine has a `TableDecoder` (CUDA), through fixed-shape steps over the rows' block tables (`graph_decoder.py`).

The schedule depends only on the inputs (lengths, EOS), never on timing, so seeded runs reproduce.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

import torch

from ulorl.rollout.engines.base import GenerationOutput, SamplingParams
from ulorl.rollout.engines.torch.attention import build_decode_plan
from ulorl.rollout.engines.torch.block_manager import BlockManager
from ulorl.rollout.engines.torch.graph_decoder import TableDecoder
from ulorl.rollout.engines.torch.kept_rows import KeptRow, KeptRows
from ulorl.rollout.engines.torch.kv_cache import PagedKVCache
from ulorl.rollout.engines.torch.runner import ModelRunner
from ulorl.rollout.engines.torch.sampler import row_uniforms, sample_tokens
from ulorl.rollout.engines.torch.sequence import Sequence


# the blocks in use are compacted to the bottom of the pool when they are fewer than this fraction of the blocks
# below the high-water mark (the decode attention reads every block below it; `BlockManager.compact`)
COMPACT_BELOW = 0.75
COMPACT_MIN_HOLES = 16


class Scheduler:
    """Runs one call to completion over `cache` / `blocks` (holding at the start and at the end only the blocks of
    the rows in `kept`, valid for weights `version`)."""

    def __init__(self, runner: ModelRunner, cache: PagedKVCache, blocks: BlockManager, stats, prefixes: list[list[int]],
                 max_new: int, params: SamplingParams, seed: int, eos_ids: list[int], max_batch: int,
                 prefill_tokens: int, progress: Callable[[int], None] | None = None, run_min_blocks: int = 0,
                 table: TableDecoder | None = None, kept: KeptRows | None = None, keep: bool = False,
                 version: tuple[int, ...] = (), streams: list[int] | None = None, fused_sampler=None) -> None:
        self.runner, self.cache, self.blocks, self.stats = runner, cache, blocks, stats
        self.fused_sampler = fused_sampler  # `triton_sampler.FusedSampler` (CUDA) or None: `sample_tokens` only
        self.params, self.seed, self.eos = params, seed, set(eos_ids)
        self.max_batch, self.prefill_tokens, self.progress = max_batch, prefill_tokens, progress
        self.run_min_blocks = run_min_blocks  # a fresh prefill's consecutive full blocks read as one view (0: never)
        self.table = table  # fixed-shape decode over block tables (CUDA graphs); None: the split-K plan
        self.capacity_blocks = blocks.blocks_for(max((len(p) for p in prefixes), default=0) + max_new)
        if streams is not None and len(streams) != len(prefixes):
            raise ValueError(f"{len(streams)} stream ids for {len(prefixes)} prefixes")
        streams = range(len(prefixes)) if streams is None else streams
        self.seqs = [Sequence(i, list(p), max_new, stream) for i, (p, stream) in enumerate(zip(prefixes, streams))]
        self.waiting: deque[Sequence] = deque(self.seqs)
        self.running: list[Sequence] = []
        self._shared_pairs: tuple[torch.Tensor, torch.Tensor] | None = None  # cached while `running` is unchanged
        self.kept, self.keep, self.version = kept, keep, version
        self.parked: list[Sequence] = []  # rows done at `max_new` whose blocks this call keeps (with `keep`)
        self.resumed: set[int] = set()  # indices of the rows that started from kept K/V
        if kept is not None and len(kept):
            self._resume()

    def run(self) -> list[GenerationOutput]:
        logits = self._decode() if self.running else None  # resumed rows: their last token gives their logits
        logits = self._admit(logits)
        while self.running:
            self._sample(logits)
            self._retire()
            logits = self._decode() if self.running else None
            logits = self._admit(logits)
        for s in self.parked:
            self.kept.add(KeptRow(tuple(s.prefix + s.tokens[:-1]), s.blocks, s.shared, s.run), self.version,
                          self.blocks)
        outs = []
        for s in self.seqs:
            resumed = s.index in self.resumed and not s.preemptions  # a preempted row was prefilled after all
            outs.append(GenerationOutput(tokens=s.tokens, logprobs=s.logprobs, eos=s.eos,
                                         prefill_tokens=0 if resumed else len(s.prefix), resumed=resumed))
        return outs

    def _resume(self) -> None:
        """Start the rows that continue a kept row (same weights, same pool) from its blocks; release the rest."""
        if self.kept.valid_for(self.version, self.blocks):
            for s in self.seqs:
                if len(self.running) == self.max_batch:
                    break
                row = self.kept.take(tuple(s.prefix[:-1]))
                if row is None:
                    continue
                s.blocks, s.shared, s.run, s.cached = row.blocks, row.shared, row.run, len(s.prefix) - 1
                self.blocks.reown(row.blocks[row.shared:], s.index)
                if 0 < self.run_min_blocks <= s.cached // self.blocks.block_size and s.run < len(s.blocks):
                    self._into_run(s)
                self.running.append(s)
                self.resumed.add(s.index)
            self.waiting = deque(s for s in self.seqs if s.index not in self.resumed)
            self.stats.extra["resumed_rows"] = self.stats.extra.get("resumed_rows", 0) + len(self.resumed)
            self.stats.extra["resumed_tokens"] = self.stats.extra.get("resumed_tokens", 0) + \
                sum(s.cached for s in self.running)
        self.kept.release_all()
        if self.run_min_blocks and self._runs_above(self.running):  # the holes the resumed rows left: packed
            self._compact()

    # --- one step -------------------------------------------------------------------------------------------

    def _sample(self, logits: torch.Tensor) -> None:
        """Sample one token per running row (one host synchronisation for the whole batch)."""
        uniforms = None if self.params.greedy else row_uniforms(
            self.seed, [s.stream for s in self.running], [len(s.tokens) for s in self.running], logits.device)
        fused = self.fused_sampler(logits, self.params, uniforms) if self.fused_sampler is not None else None
        tok, lp = fused if fused is not None else sample_tokens(logits, self.params, uniforms)
        eos = self.eos
        for s, t, p in zip(self.running, tok.tolist(), lp.tolist()):  # the first `tolist` is the synchronisation
            s.tokens.append(t)
            s.logprobs.append(p)
            s.eos = t in eos
        self.stats.useful_tokens += len(self.running)

    def _retire(self) -> None:
        done = [s for s in self.running if s.done]
        if not done:
            return
        for s in done:
            if self.keep and not s.eos:
                self.parked.append(s)
            else:
                self._free(s)
        self.running = [s for s in self.running if not s.done]
        self._shared_pairs = None
        if self.progress is not None:
            self.progress(len(done))

    def _decode(self) -> torch.Tensor:
        """Make room for every running row's next token (preempting the newest rows if needed), then decode."""
        bs = self.blocks.block_size
        while True:
            full = [s for s in self.running if s.cached // bs == len(s.blocks)]  # the next token opens a block
            if len(full) <= self.blocks.num_free:
                break
            if self._unpark() is None:
                self._preempt(self.running.pop())
        for s in full:
            s.blocks += self.blocks.allocate(1, s.index)
        if self.table is not None:
            logits = self.table.decode([s.last_token for s in self.running], [s.cached for s in self.running],
                                       [s.blocks for s in self.running], self.capacity_blocks)
        else:
            logits = self._decode_split_k()
        for s in self.running:
            s.cached += 1
        st = self.stats
        st.decode_iterations += 1
        st.decode_slots += len(self.running)
        if self.blocks.num_used > st.extra.get("peak_blocks", 0):  # the pool's peak, and the tokens alive then
            st.extra["peak_blocks"] = self.blocks.num_used
            st.extra["live_tokens_at_peak"] = sum(s.cached for s in self.running)
        return logits

    def _decode_split_k(self) -> torch.Tensor:
        """The step through the split-K plan (`attention.py`): compaction first when holes fill the pool."""
        bs = self.blocks.block_size
        hw = self.blocks.high_water
        held = self.running + self.parked
        used = self.blocks.num_used - sum(s.run for s in held)  # the blocks of runs are at the top
        if hw - used >= COMPACT_MIN_HOLES and used < COMPACT_BELOW * hw and self._runs_above(held):
            self._compact()
        dev, n = self.cache.device, len(self.running)
        pos_list = [s.cached for s in self.running]
        last = [s.blocks[p // bs] for s, p in zip(self.running, pos_list)]
        pos, last_block = torch.tensor(pos_list, device=dev), torch.tensor(last, device=dev)
        row_of = torch.full((len(self.seqs) + 1,), n, dtype=torch.long, device=dev)
        row_of[torch.tensor([s.index for s in self.running], device=dev)] = torch.arange(n, device=dev)
        owner = self.blocks.owner[: self.blocks.high_water]
        owner_row = row_of[owner]  # FREE (-1) reads row_of[-1] == n
        shared_rows, shared_blocks = self._shared()
        runs, run_blocks = self._runs()
        plan = build_decode_plan(n, owner_row, last_block, pos % bs + 1, bs, self.cache.shape.dtype,
                                 shared_rows, shared_blocks, runs, run_blocks)
        tokens = torch.tensor([s.last_token for s in self.running], device=dev)
        return self.runner.decode(self.cache, tokens, pos, last_block, plan)

    def _shared(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(row, block) pairs of shared blocks (cached while the running rows are unchanged)."""
        if self._shared_pairs is None:
            rows, blocks = [], []
            for r, s in enumerate(self.running):
                rows += [r] * s.shared
                blocks += s.blocks[: s.shared]
            dev = self.cache.device
            self._shared_pairs = (torch.tensor(rows, dtype=torch.long, device=dev),
                                  torch.tensor(blocks, dtype=torch.long, device=dev))
        return self._shared_pairs

    def _runs(self) -> tuple[list[tuple[int, int, int]], torch.Tensor]:
        """(row, first block, count) of each run's blocks before the block being written this step, and those
        blocks (the block being written is read by the masked call over last blocks)."""
        bs, runs, covered = self.blocks.block_size, [], []
        for r, s in enumerate(self.running):
            count = min(s.run, s.cached // bs)
            if count:
                runs.append((r, s.blocks[0], count))
                covered.append(torch.arange(s.blocks[0], s.blocks[0] + count))
        dev = self.cache.device
        return runs, (torch.cat(covered).to(dev) if covered else torch.zeros(0, dtype=torch.long, device=dev))

    # --- blocks ---------------------------------------------------------------------------------------------

    def _runs_above(self, seqs: list[Sequence]) -> bool:
        """Whether every run of `seqs` lies above the high-water mark (a run that reached down is never moved)."""
        hw = self.blocks.high_water
        return all(s.blocks[0] >= hw for s in seqs if s.run)

    def _compact(self) -> None:
        """Move the blocks above the used count into the holes below it (K/V copied once, block tables remapped)."""
        moves = self.blocks.compact()
        self.cache.copy_blocks(list(moves), list(moves.values()))
        for s in self.running + self.parked:
            s.blocks = [moves.get(b, b) for b in s.blocks]
        self._shared_pairs = None
        self.stats.extra["compacted_blocks"] = self.stats.extra.get("compacted_blocks", 0) + len(moves)

    def _free(self, s: Sequence) -> None:
        self.blocks.release(s.blocks, s.index)
        s.blocks, s.shared, s.run, s.cached = [], 0, 0, 0

    def _into_run(self, s: Sequence) -> None:
        """Copy a resumed row's blocks (grown one by one among other rows' during its last call) into consecutive
        blocks at the top of the pool, read as one view like a long prefill's (see Runs); kept where the top has
        no room or is fragmented. A copy of its K/V costs far less than the prefill it replaces."""
        bm, n = self.blocks, len(s.blocks)
        if bm.num_free < n:
            return
        top = bm.allocate(n, s.index, top=True)
        if top[-1] - top[0] != n - 1:
            bm.release(top, s.index)
            return
        self.cache.copy_blocks(s.blocks, top)
        bm.release(s.blocks, s.index)
        s.blocks, s.shared, s.run = top, 0, n

    def _unpark(self) -> int | None:
        """Release the newest kept row of this call; returns the blocks that freed (None: none was kept)."""
        if not self.parked:
            return None
        before = self.blocks.num_free
        self._free(self.parked.pop())
        self.stats.extra["kept_rows_released"] = self.stats.extra.get("kept_rows_released", 0) + 1
        return self.blocks.num_free - before

    def _preempt(self, s: Sequence) -> None:
        self._free(s)
        s.preemptions += 1
        self.waiting.appendleft(s)
        self._shared_pairs = None
        self.stats.extra["preemptions"] = self.stats.extra.get("preemptions", 0) + 1

    def _admit(self, logits: torch.Tensor | None) -> torch.Tensor | None:
        """Prefill waiting sequences into free rows and blocks; returns `logits` `(n_running, V)` with the new rows'
        next-token logits appended (None when nothing runs)."""
        bm, bs = self.blocks, self.blocks.block_size
        groups: list[list[Sequence]] = []
        free, budget, rows = bm.num_free, self.prefill_tokens, len(self.running)
        while self.waiting and rows < self.max_batch:
            head = self.waiting[0]
            n = head.length
            if groups and n > budget:
                break
            group = [head]
            if not head.tokens:  # fresh: the following samples of the same prompt join it
                for s in list(self.waiting)[1: self.max_batch - rows]:
                    if s.tokens or s.prefix != head.prefix:
                        break
                    group.append(s)
            full, tail = divmod(n, bs)
            while group:
                k = len(group)
                shared = full if k > 1 else 0
                need = (full - shared) + (k if tail else 0) + shared  # own blocks + per-sample tails + shared once
                if free - need >= rows + k - 1:  # one block of headroom per other running row
                    break
                group.pop()
            if not group:
                freed = self._unpark()
                if freed is None:
                    break
                free += freed
                continue
            for _ in group:
                self.waiting.popleft()
            free -= need
            rows += len(group)
            budget -= n
            groups.append(group)
        if not groups:
            return logits
        return self._prefill(groups, logits)

    def _prefill(self, groups: list[list[Sequence]], logits: torch.Tensor | None) -> torch.Tensor:
        bm, bs = self.blocks, self.blocks.block_size
        seqs, tables, copies = [], [], []
        for group in groups:
            lead = group[0]
            full, tail = divmod(lead.length, bs)
            long_alone = len(group) == 1 and full >= self.run_min_blocks > 0
            lead.blocks = bm.allocate(bm.blocks_for(lead.length), lead.index, top=long_alone)
            if len(group) > 1:
                shared = lead.blocks[:full]
                bm.share(shared)  # one reference per other sample (the lead holds the first)
                for s in group[2:]:
                    bm.share(shared)
                lead.shared = full
                for s in group[1:]:
                    s.blocks, s.shared = list(shared), full
                    if tail:
                        own = bm.allocate(1, s.index)
                        s.blocks += own
                        copies.append((lead.blocks[-1], own[0]))
            if long_alone:
                if lead.blocks[-1] - lead.blocks[0] == len(lead.blocks) - 1:  # ascending: consecutive
                    lead.run = len(lead.blocks)
                else:  # the top of the pool is fragmented: blocks from the bottom, read by the batched call
                    bm.release(lead.blocks, lead.index)
                    lead.blocks = bm.allocate(bm.blocks_for(lead.length), lead.index)
            for s in group:
                s.cached = s.length
            seqs.append(lead.context)
            tables.append(lead.blocks)
        new = self.runner.prefill(self.cache, seqs, tables)
        self.cache.copy_blocks([a for a, _ in copies], [b for _, b in copies])
        sizes = torch.tensor([len(g) for g in groups], device=new.device)
        new = new.repeat_interleave(sizes, dim=0)
        for group in groups:
            self.running += group
        self._shared_pairs = None
        real = sum(map(len, seqs))
        self.stats.prefill_tokens += real
        self.stats.prefill_padded_tokens += real
        return new if logits is None else torch.cat([logits, new])
