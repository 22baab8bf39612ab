"""The torch engine (default): continuous batching over a slot KV cache, in plain PyTorch.

Built for ultra-long outputs, on CPU and CUDA, with no dependency beyond torch and the
model's transformers modules:

- the KV cache is allocated up front (`SlotKVCache`: `max_batch` slots of prefix + new
  tokens), checked against `rollout.kv_cache_gib` first, and reused across calls;
- one decode iteration feeds one token to every live slot; each row attends over its
  own context only, and the new K/V is written in place (cost per token stays flat
  as outputs grow, apart from reading the longer context);
- prefill is packed: fresh prompts and continued samples of any lengths go through
  the model without padding (`EngineStats.prefill_padded_tokens == prefill_tokens`);
- continuous batching: a row that finishes frees its slot, and the next waiting prefix
  is prefilled into it at once, so prefixes beyond `max_batch` never wait for the whole
  previous chunk.

The contract is the same as every engine's (`base.py`): behaviour log-probs are
`log_softmax(logits / T)` of the sampled token, before top-k/top-p; runs with a seed
reproduce (the schedule depends only on the inputs, never on timing). Weights are the
model's own parameters: shared with the learner without a copy, or loaded by
`sync_weights`.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ulorl.rollout.engines.base import EngineStats, GenerationOutput, SamplingParams, check_prefixes, load_weights
from ulorl.rollout.engines.decoder import SlotDecoder
from ulorl.rollout.engines.kv_cache import SlotKVCache
from ulorl.rollout.engines.token_sampling import sample_tokens

CAPACITY_STEP = 256  # cache capacity is rounded up to this many tokens, so growing prefixes rarely reallocate


class TorchEngine:
    """Continuous-batching engine over a Llama-family transformers model."""

    continuous_batching = True  # see `Engine`: callers may send every prefix in one call

    def __init__(self, model, eos_ids: list[int], max_batch: int = 256, kv_cache_gib: float = 4.0,
                 prefill_tokens: int = 16384) -> None:
        if not eos_ids:
            raise ValueError("the torch engine needs at least one EOS token id")
        if max_batch < 1 or prefill_tokens < 1 or not kv_cache_gib > 0:
            raise ValueError(f"max_batch={max_batch}, prefill_tokens={prefill_tokens} and kv_cache_gib="
                             f"{kv_cache_gib} must be positive")
        self.model = model
        self.decoder = SlotDecoder(model)
        self.eos_ids = sorted(set(eos_ids))
        self.max_batch, self.kv_cache_gib, self.prefill_tokens = max_batch, kv_cache_gib, prefill_tokens
        self.stats = EngineStats()
        self.cache: SlotKVCache | None = None

    def sync_weights(self, state_dict: dict[str, torch.Tensor]) -> None:
        load_weights(self.model, state_dict)

    def reserve(self, slots: int, capacity: int) -> None:
        """Allocate the KV cache for `slots` sequences of `capacity` tokens now (a run calls this at start, so a
        budget error comes before any work)."""
        self._cache_for(min(slots, self.max_batch), capacity)

    def release(self) -> None:
        """Free the KV cache (it is allocated again by the next `generate`)."""
        self.cache = None

    def _cache_for(self, slots: int, capacity: int) -> SlotKVCache:
        dev = self.decoder.device
        if self.cache is not None and self.cache.fits(slots, capacity, dev):
            return self.cache
        self.cache = None  # free the old one before allocating the new one
        shape = self.decoder.kv_shape()
        rounded = -(-capacity // CAPACITY_STEP) * CAPACITY_STEP
        try:
            self.cache = SlotKVCache(shape, slots, rounded, dev, self.kv_cache_gib)
        except ValueError:
            self.cache = SlotKVCache(shape, slots, capacity, dev, self.kv_cache_gib)  # exact size, or the error
        return self.cache

    @torch.no_grad()
    def generate(self, prefixes: list[list[int]], max_new_tokens: int, params: SamplingParams,
                 seed: int | None = None, progress: Callable[[int], None] | None = None) -> list[GenerationOutput]:
        """`progress(n)` is called when n rows finish (for a progress bar over a long call)."""
        check_prefixes(prefixes, max_new_tokens)
        if not prefixes:
            return []
        was_training = self.model.training
        self.model.eval()
        try:
            return _Run(self, prefixes, max_new_tokens, params, seed, progress).run()
        finally:
            self.model.train(was_training)


class _Run:
    """One `generate` call: the waiting queue, the live slots and the outputs.

    Host-side lists hold each live slot's request index, context length and number of
    new tokens (slot i is row i: live rows are always slots `[0, n_live)`).
    """

    def __init__(self, eng: TorchEngine, prefixes, max_new: int, params: SamplingParams, seed: int | None,
                 progress: Callable[[int], None] | None = None) -> None:
        self.eng, self.dec, self.prefixes, self.max_new, self.params = eng, eng.decoder, prefixes, max_new, params
        self.progress = progress
        dev = self.dec.device
        self.gen = torch.Generator(device=dev).manual_seed(seed) if seed is not None else None
        self.slots = min(eng.max_batch, len(prefixes))
        self.cache = eng._cache_for(self.slots, max(len(p) for p in prefixes) + max_new)
        self.eos = torch.tensor(eng.eos_ids, device=dev)
        self.tokens = torch.zeros((len(prefixes), max_new), dtype=torch.long, device=dev)
        self.logps = torch.zeros((len(prefixes), max_new), dtype=torch.float32, device=dev)
        self.n_new = [0] * len(prefixes)
        self.hit_eos = [False] * len(prefixes)
        self.next = 0  # first waiting request
        self.req: list[int] = []  # per live slot
        self.ctx: list[int] = []

    def run(self) -> list[GenerationOutput]:
        logits = self._admit(torch.empty((0, 0), device=self.dec.device))
        while self.req:
            tok = self._sample(logits)
            keep = self._retire(tok)
            logits = self.dec.decode(self.cache, keep, self.ctx) if self.req else logits[:0]
            if self.req:
                st = self.eng.stats
                st.decode_iterations += 1
                st.decode_slots += len(self.req)
                self.ctx = [c + 1 for c in self.ctx]
            logits = self._admit(logits)
        tok_list, lp_list = self.tokens.tolist(), self.logps.tolist()
        return [GenerationOutput(tokens=tok_list[i][: n], logprobs=lp_list[i][: n], eos=self.hit_eos[i],
                                 prefill_tokens=len(p))
                for i, (p, n) in enumerate(zip(self.prefixes, self.n_new))]

    def _sample(self, logits: torch.Tensor) -> torch.Tensor:
        """Sample one token per live slot and record it; returns the tokens `(n_live,)`."""
        tok, lp = sample_tokens(logits, self.params, self.gen)
        rows = torch.tensor(self.req, device=tok.device)
        cols = torch.tensor([self.n_new[r] for r in self.req], device=tok.device)
        self.tokens[rows, cols] = tok
        self.logps[rows, cols] = lp.float()
        for r in self.req:
            self.n_new[r] += 1
        self.eng.stats.useful_tokens += len(self.req)
        return tok

    def _retire(self, tok: torch.Tensor) -> torch.Tensor:
        """Free the slots of finished rows, move the last live rows into the holes; returns the tokens
        to feed to the remaining rows, in their new slot order."""
        hits = torch.isin(tok, self.eos).tolist()
        done = []
        for i, (r, h) in enumerate(zip(self.req, hits)):
            if h:
                self.hit_eos[r] = True
            if h or self.n_new[r] >= self.max_new:
                done.append(i)
        if not done:
            return tok
        if self.progress is not None:
            self.progress(len(done))
        n_keep = len(self.req) - len(done)
        done_set = set(done)
        holes = [i for i in done if i < n_keep]
        movers = [i for i in range(n_keep, len(self.req)) if i not in done_set]
        order = list(range(n_keep))
        for h, m in zip(holes, movers):
            order[h] = m
        if movers:
            self.cache.move(movers, holes, max(self.ctx[m] for m in movers))
        self.req = [self.req[i] for i in order]
        self.ctx = [self.ctx[i] for i in order]
        return tok[torch.tensor(order, dtype=torch.long, device=tok.device)]

    def _admit(self, logits: torch.Tensor) -> torch.Tensor:
        """Prefill waiting prefixes into free slots (up to the prefill token budget; at least one);
        returns `logits` with the new rows' next-token logits appended."""
        free = self.slots - len(self.req)
        take, budget = [], self.eng.prefill_tokens
        while free > len(take) and self.next + len(take) < len(self.prefixes):
            n = len(self.prefixes[self.next + len(take)])
            if take and n > budget:
                break
            take.append(self.next + len(take))
            budget -= n
        if not take:
            return logits
        seqs = [self.prefixes[i] for i in take]
        new_slots = list(range(len(self.req), len(self.req) + len(take)))
        new_logits = self.dec.prefill(self.cache, seqs, new_slots)
        st = self.eng.stats
        real = sum(len(s) for s in seqs)
        st.prefill_tokens += real
        st.prefill_padded_tokens += real
        self.next += len(take)
        self.req += take
        self.ctx += [len(s) for s in seqs]
        return new_logits if logits.numel() == 0 else torch.cat([logits, new_logits])
