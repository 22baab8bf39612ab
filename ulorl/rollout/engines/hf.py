"""The Hugging Face engine (`rollout.engine=hf`): the model's own forward with a `DynamicCache`.

Kept for architectures the default torch engine does not implement (it runs any
transformers causal LM). Its costs, measured in docs/benchmarks.md: the cache grows by
concatenation and every row attends over the padded batch width, so time per token
grows with output length; prefixes are left-padded to the longest one (re-prefilled
continued samples pay for the padding: `EngineStats.prefill_padded_tokens`); a batch
runs until its longest row ends (rows that hit EOS leave it, but no waiting prefix takes
their place). Weights are shared with the learner (zero-copy) or loaded by `sync_weights`.
"""

from __future__ import annotations

import inspect

import torch
from transformers import DynamicCache, PreTrainedModel

from ulorl.rollout.engines.base import EngineStats, GenerationOutput, SamplingParams, check_prefixes, load_weights
from ulorl.rollout.engines.torch.sampler import sample_tokens


class HFEngine:
    """Engine over a `transformers` causal LM."""

    def __init__(self, model: PreTrainedModel, pad_id: int, eos_ids: list[int], max_batch: int = 256):
        if not eos_ids:
            raise ValueError("HFEngine needs at least one EOS token id")
        self.model = model
        self.pad_id = pad_id
        self.eos_ids = torch.tensor(sorted(set(eos_ids)))
        self.max_batch = max_batch
        self.stats = EngineStats()
        # transformers >= 5.x names the KV-cache argument `cache`; older releases `past_key_values`
        params = inspect.signature(model.forward).parameters
        self._cache_kw = "cache" if "cache" in params else "past_key_values"

    def sync_weights(self, state_dict: dict[str, torch.Tensor]) -> None:
        """Copy the learner's weights in (no-op cost when they are the same tensors)."""
        load_weights(self.model, state_dict)

    @torch.no_grad()
    def generate(
        self, prefixes: list[list[int]], max_new_tokens: int, params: SamplingParams, seed: int | None = None
    ) -> list[GenerationOutput]:
        check_prefixes(prefixes, max_new_tokens)
        gen = None
        if seed is not None:
            gen = torch.Generator().manual_seed(seed)
        outs: list[GenerationOutput] = []
        was_training = self.model.training
        self.model.eval()
        try:
            for lo in range(0, len(prefixes), self.max_batch):
                outs += self._generate_batch(prefixes[lo : lo + self.max_batch], max_new_tokens, params, gen)
        finally:
            self.model.train(was_training)
        return outs

    def _generate_batch(self, prefixes, max_new_tokens, params, gen) -> list[GenerationOutput]:
        device = next(self.model.parameters()).device
        B = len(prefixes)
        lens = torch.tensor([len(p) for p in prefixes], device=device)
        P = int(lens.max())
        ids = torch.full((B, P), self.pad_id, dtype=torch.long, device=device)
        for i, p in enumerate(prefixes):  # building the padded input once, not in the decode loop
            ids[i, P - len(p) :] = torch.tensor(p, dtype=torch.long)
        attn = torch.zeros((B, P + max_new_tokens), dtype=torch.long, device=device)
        attn[:, :P] = (torch.arange(P, device=device)[None, :] >= (P - lens)[:, None]).long()
        pos = (attn[:, :P].cumsum(-1) - 1).clamp(min=0)
        cache = DynamicCache()
        out = self.model(input_ids=ids, attention_mask=attn[:, :P], position_ids=pos, use_cache=True, logits_to_keep=1,
                         **{self._cache_kw: cache})
        logits = out.logits[:, -1]
        self.stats.prefill_tokens += int(lens.sum())
        self.stats.prefill_padded_tokens += B * P

        tokens = torch.full((B, max_new_tokens), self.pad_id, dtype=torch.long, device=device)
        logps = torch.zeros((B, max_new_tokens), device=device)
        n_new = torch.zeros(B, dtype=torch.long, device=device)
        eos = torch.zeros(B, dtype=torch.bool, device=device)
        rows = torch.arange(B, device=device)  # original row of each live batch row
        eos_ids = self.eos_ids.to(device)
        for t in range(max_new_tokens):
            tok, lp = sample_tokens(logits, params, generator=gen)
            tokens[rows, t] = tok
            logps[rows, t] = lp
            n_new[rows] += 1
            hit = torch.isin(tok, eos_ids)
            eos[rows] |= hit
            self.stats.decode_iterations += 1
            self.stats.decode_slots += len(rows)
            self.stats.useful_tokens += len(rows)
            if t == max_new_tokens - 1:
                break
            keep = ~hit
            if not bool(keep.any()):
                break
            if not bool(keep.all()):  # finished rows leave the batch and the cache
                idx = keep.nonzero().squeeze(-1)
                cache.batch_select_indices(idx)
                rows, tok, attn, lens = rows[idx], tok[idx], attn[idx], lens[idx]
            attn[:, P + t] = 1
            step_pos = (lens + t)[:, None]
            out = self.model(input_ids=tok[:, None], attention_mask=attn[:, : P + t + 1], position_ids=step_pos,
                             use_cache=True, **{self._cache_kw: cache})
            logits = out.logits[:, -1]
        n_list, eos_list = n_new.tolist(), eos.tolist()
        tok_list, lp_list = tokens.tolist(), logps.tolist()
        return [
            GenerationOutput(tokens=tok_list[i][: n_list[i]], logprobs=lp_list[i][: n_list[i]], eos=eos_list[i],
                             prefill_tokens=len(prefixes[i]))
            for i in range(B)
        ]
