"""`LocalLearner`, the `Learner` in this process: log-probs and entropies (chunked), the UloRL loss, the update
(`train.optimizer`: AdamW, the paper's, or SGD).

One call to `update` is one gradient update on a batch of whole groups: GRPO
advantages over each group, log-probs/entropies of the response tokens from logits
divided by the sampling temperature (never the full `(T, V)` logits at once), the IS
mode's pi_old (tois/pois/sais/...), the entropy mask (none/mpt/dmmpt), the clipped
token-level loss. The batch is split into micro-batches under a token budget, padded
or packed (`train.packing`, `ulorl.learners.micro_batch`); each micro-batch loss is
divided by the *global* number of response tokens, so the summed gradients equal one
full-batch step. A non-finite loss or gradient norm skips the update and leaves weights
and optimizer state untouched. The metrics carry the learning rate of the update
(`actor/lr`), as the `Learner` protocol asks.

Data parallelism plugs in through four reduction hooks (`_global_sum`, `_all_finite`,
`_sync_gradients`, `_merge_metrics`), identities here; `ShardedLearner` (in
`ulorl.distributed.sharded_learner`) overrides them to sum over `torch.distributed` ranks,
and passes the advantages of the whole batch to `update_on`, so each rank trains its
shard exactly as one process would.
"""

from __future__ import annotations

import contextlib
import math

import torch

from ulorl.algo import group_advantages, pois_bias_by_age, policy_loss, stale_token_policy
from ulorl.algo.entropy_mask import ENTROPY_MASKS, EntropyMaskMode
from ulorl.algo.logprobs import chunked_logprobs_entropy
from ulorl.config import AlgoConfig, TrainConfig
from ulorl.learners.micro_batch import MicroBatch, collate_padded, make_micro_batches, zero_loss_micro_batch
from ulorl.learners.optimizers import load_keeping_settings, make_optimizer
from ulorl.learners.varlen import ATTN_NAME, install_varlen, packed_forward, packed_kernel
from ulorl.trajectory import Trajectory

__all__ = ["LocalLearner", "MicroBatch", "make_micro_batches", "zero_loss_micro_batch"]
_collate = collate_padded  # every sample in one padded micro-batch (the tests' reference path)


class LocalLearner:
    """The `Learner` protocol (`ulorl.learners.base`) in this process, on the model it is given."""

    def __init__(self, model: torch.nn.Module, train: TrainConfig, algo: AlgoConfig, temperature: float,
                 pad_id: int) -> None:
        self.model, self.train_cfg, self.algo, self.temperature, self.pad_id = model, train, algo, temperature, pad_id
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = make_optimizer(self.params, train)
        self.entropy_mask = ENTROPY_MASKS[EntropyMaskMode(algo.entropy_mask)]
        # packed rows: attention once per sample (ulorl.learners.varlen) where the model's attention allows it, or
        # once per row through torch's varlen_attn where it runs (CUDA, bf16/fp16: `packed_kernel`, probed once)
        self._varlen = train.packing and train.sequence_parallel == 1 and install_varlen(model)
        ours = self._varlen and model.config._attn_implementation == ATTN_NAME  # (not flash-attn's own)
        self.packed_kernel = packed_kernel(model, train.device, train.autocast) if ours else None

    # -- forward ---------------------------------------------------------------------------------
    def forward(self, mb: MicroBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-probs (differentiable) and entropies (detached) of the response tokens, both `(b, T)`, on the model's
        device (a micro-batch collated on the CPU by `make_micro_batches` is moved there)."""
        mb = self._on_device(mb)
        return self.head_logprobs(mb, self.body(mb))

    def body(self, mb: MicroBatch) -> torch.Tensor:
        """`(rows, S, d)` last hidden states of the backbone (in `train.autocast`'s dtype). A packed micro-batch
        has no attention mask: its position ids restart at each sample and its boundaries go to the attention
        as `cu_seq_lens_q/k` (`ulorl.learners.micro_batch`, `ulorl.learners.varlen`); `use_cache=False`, or
        transformers' packed-sequence detection (the fallback) is skipped."""
        varlen = {}
        if mb.seq_bounds is not None and self._varlen:  # several samples in the row
            n = int((mb.seq_bounds[1:] - mb.seq_bounds[:-1]).max())
            varlen = dict(cu_seq_lens_q=mb.seq_bounds, cu_seq_lens_k=mb.seq_bounds, max_length_q=n, max_length_k=n)
            if self.packed_kernel is not None:
                varlen["packed_kernel"] = self.packed_kernel
        with self._autocast(), packed_forward() if varlen else contextlib.nullcontext():
            return self.model.base_model(input_ids=mb.input_ids, attention_mask=mb.attention_mask,
                                         position_ids=mb.position_ids, use_cache=False, **varlen).last_hidden_state

    def head_logprobs(self, mb: MicroBatch, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """`(b, T)` log-probs and entropies of the response tokens from the body's `(rows, S, d)` hidden states."""
        return self.to_response_layout(mb, *self.head_flat(hidden[mb.hidden_rows, mb.hidden_cols], mb.targets))

    def head_flat(self, hidden: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """`(N,)` log-probs (differentiable) and entropies of `(N,)` targets from their `(N, d)` hidden states."""
        head = self.model.get_output_embeddings()
        if hidden.dtype != head.weight.dtype:  # autocast: the head (and so the log-probs) in the weights' dtype
            hidden = hidden.to(head.weight.dtype)
        return chunked_logprobs_entropy(hidden, head.weight, targets, self.temperature, self.train_cfg.logit_chunk,
                                        bias=getattr(head, "bias", None))

    @staticmethod
    def to_response_layout(mb: MicroBatch, lp_flat: torch.Tensor,
                           ent_flat: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """`(N,)` per-token values -> `(b, T)` (zeros outside the responses)."""
        logprobs = torch.zeros(mb.response_mask.shape, dtype=lp_flat.dtype, device=lp_flat.device)
        entropy = torch.zeros(mb.response_mask.shape, dtype=ent_flat.dtype, device=ent_flat.device)
        logprobs = logprobs.index_put((mb.sample_rows, mb.target_cols), lp_flat)
        entropy[mb.sample_rows, mb.target_cols] = ent_flat
        return logprobs, entropy

    def micro_batch_loss(self, mb: MicroBatch, logprobs: torch.Tensor, entropy: torch.Tensor,
                         denom: int) -> tuple[torch.Tensor, dict]:
        """The micro-batch's share of the batch loss (IS mode's pi_old, entropy mask, clipped loss / `denom`)."""
        a = self.algo
        stale = stale_token_policy(a.is_mode, logprobs, mb.behaviour_logprobs, mb.segment_age, mb.response_mask,
                                   tis_cap=a.tis_cap, max_age=a.max_stale)
        ent_mask = self.entropy_mask(logprobs.detach(), entropy, mb.rewards, mb.response_mask, a.tau, a.sigma)
        loss, m = policy_loss(logprobs, stale.old_logprobs, mb.advantages, mb.response_mask, dmmpt_mask=ent_mask,
                              eps_low=a.eps_low, eps_high=a.eps_high, agg=a.loss_agg, num_tokens=denom,
                              token_weights=stale.token_weights, extra_mask=stale.extra_mask)
        return loss, m

    def _autocast(self):
        """`train.autocast`: the backbone's forward in a lower-precision compute dtype (no-op for "none")."""
        name = self.train_cfg.autocast
        return torch.autocast(torch.device(self.train_cfg.device).type, dtype=getattr(torch, name, None),
                              enabled=name != "none")

    # -- one gradient update ---------------------------------------------------------------------
    def update(self, trajs: list[Trajectory], version: int, loss_keep: list[bool] | None = None) -> dict[str, float]:
        """One gradient update on `trajs` (whole groups). `loss_keep[i]=False` drops sample i from the loss.

        The metrics of `Learner.update` (`ulorl.learners.base`), `actor/lr` included."""
        adv = self.advantages(trajs)
        return {**self.update_on(trajs, adv, version, loss_keep), **advantage_metrics(adv)}

    def advantages(self, trajs: list[Trajectory]) -> torch.Tensor:
        """`(B,)` GRPO advantages over the groups of `trajs` (every group must be whole)."""
        rewards = torch.tensor([float(t.reward or 0.0) for t in trajs])
        return group_advantages(rewards, [t.group_id for t in trajs], norm_by_std=self.algo.norm_adv_by_std)

    def update_on(self, trajs: list[Trajectory], advantages: torch.Tensor, version: int,
                  loss_keep: list[bool] | None = None) -> dict[str, float]:
        """The gradient update of `update` given `(B,)` advantages (a data-parallel rank: its shard's slice)."""
        mbs = self.micro_batches(trajs, advantages, version, loss_keep)
        local = torch.tensor([sum(int(mb.response_mask.sum()) for mb in mbs),
                              sum(int(mb.response_mask.any(-1).sum()) for mb in mbs)], dtype=torch.float64)
        trained_tokens, n_seqs = (int(x) for x in self._global_sum(local))  # over all ranks
        n_tokens, n_seqs = max(trained_tokens, 1), max(n_seqs, 1)  # divisors: a batch without a token adds nothing
        denom = n_tokens if self.algo.loss_agg == "token-mean" else n_seqs
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        sums: dict[str, float] = {}
        finite = True
        for mb in mbs:
            logprobs, entropy = self.forward(mb)
            loss, m = self.micro_batch_loss(mb, logprobs, entropy, denom)
            if not torch.isfinite(loss):
                finite = False
                if not self.lockstep:  # lockstep ranks (FSDP2) must run every backward: the update is skipped anyway
                    break
            loss.backward()
            w = int(mb.response_mask.sum())
            accumulate_metrics(sums, m, w, entropy, mb, logprobs.detach())
        finite = self._all_finite(finite)
        if finite:
            self._sync_gradients()
        grad_norm = self._grad_norm() if finite else float("nan")
        skipped = not (finite and math.isfinite(grad_norm))
        if skipped:
            self.optimizer.zero_grad(set_to_none=True)  # weights and optimizer state untouched
        else:
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
        sums.update(_micro_batches=len(mbs), _pad_tokens=sum(mb.pad_tokens for mb in mbs),
                   _padded_tokens=sum(mb.input_ids.numel() for mb in mbs))
        sums = self._merge_metrics(sums)
        out = {k: v / n_tokens for k, v in sums.items() if not k.startswith("_")}
        out.update({k: v for k, v in sums.items() if k.startswith("_")})
        return _finish_metrics(out, grad_norm, skipped, trained_tokens, self.optimizer.param_groups[0]["lr"])

    def micro_batches(self, trajs: list[Trajectory], advantages: torch.Tensor, version: int,
                      loss_keep: list[bool] | None) -> list[MicroBatch]:
        mbs = make_micro_batches(trajs, advantages, version, self.pad_id, self.train_cfg.micro_batch_tokens,
                                 loss_keep, packed=self.train_cfg.packing)
        return [self._on_device(mb) for mb in mbs]

    def _on_device(self, mb: MicroBatch) -> MicroBatch:
        dev = self.params[0].device if self.params else torch.device("cpu")
        return mb if mb.input_ids.device == dev else mb.to(dev)

    # -- reductions over data-parallel ranks: identities for one process -------------------------
    lockstep = False  # True when every rank must run the same forward/backward passes (FSDP2)

    def _global_sum(self, x: torch.Tensor) -> torch.Tensor:
        """`(k,)` local counts -> the sums over all ranks."""
        return x

    def _all_finite(self, finite: bool) -> bool:
        """True when the loss was finite on every rank."""
        return finite

    def _sync_gradients(self) -> None:
        """Make every rank hold the gradient of the whole batch (a sum over ranks)."""

    def _merge_metrics(self, sums: dict[str, float]) -> dict[str, float]:
        """Merge the metric sums of all ranks (keys ending in `_max`: maximum; others: sum)."""
        return sums

    def _grad_norm(self) -> float:
        clip = self.train_cfg.grad_clip
        norm = torch.nn.utils.clip_grad_norm_(self.params, clip if clip > 0 else float("inf"))
        return float(norm)

    def state_dict(self) -> dict:
        return {"optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        """The saved optimizer state (moments, step counts) under this run's optimizer settings."""
        load_keeping_settings(self.optimizer, lambda: self.optimizer.load_state_dict(state["optimizer"]))


def accumulate_metrics(sums: dict, m: dict, w: int, entropy: torch.Tensor, mb: MicroBatch,
                       logprobs: torch.Tensor) -> None:
    """Token-weighted sums of per-micro-batch metrics."""
    for k in ("pg_clipfrac", "mask_ratio", "approx_kl", "ratio_mean", "extra_mask_ratio", "token_weight_mean"):
        if k in m:
            sums[k] = sums.get(k, 0.0) + m[k] * w
    mask = mb.response_mask
    sums["entropy"] = sums.get("entropy", 0.0) + float(entropy[mask].sum())
    sums["_pg_loss"] = sums.get("_pg_loss", 0.0) + m["pg_loss"]
    for age, d in pois_bias_by_age(logprobs, mb.behaviour_logprobs, mb.segment_age, mask).items():
        sums[f"_age{age}_sum"] = sums.get(f"_age{age}_sum", 0.0) + d["mean_abs_log_ratio"] * d["num_tokens"]
        sums[f"_age{age}_n"] = sums.get(f"_age{age}_n", 0.0) + d["num_tokens"]
        sums[f"_age{age}_max"] = max(sums.get(f"_age{age}_max", 0.0), d["max_abs_log_ratio"])


def advantage_metrics(adv: torch.Tensor) -> dict[str, float]:
    """Summary of the `(B,)` advantages of a batch."""
    return {"critic/advantages/mean": float(adv.mean()), "critic/advantages/max": float(adv.max()),
            "critic/advantages/min": float(adv.min())}


def _finish_metrics(sums: dict, grad_norm: float, skipped: bool, n_tokens: int, lr: float) -> dict:
    out = {
        "actor/lr": lr,
        "actor/entropy": sums.get("entropy", 0.0),
        "actor/pg_loss": sums.get("_pg_loss", 0.0),
        "actor/pg_clipfrac": sums.get("pg_clipfrac", 0.0),
        "actor/dmmpt_mask_ratio": sums.get("mask_ratio", 0.0),
        "actor/stale_mask_ratio": sums.get("extra_mask_ratio", 0.0),
        "actor/ppo_kl": sums.get("approx_kl", 0.0),
        "actor/ratio_mean": sums.get("ratio_mean", 1.0),
        "actor/grad_norm": grad_norm,
        "actor/skipped": float(skipped),
        "actor/micro_batches": float(sums["_micro_batches"]),
        "actor/response_tokens": float(n_tokens),
        "perf/pad_ratio": sums["_pad_tokens"] / max(sums["_padded_tokens"], 1),
    }
    for k in list(sums):
        if k.startswith("_age") and k.endswith("_n"):
            age = k[4:-2]
            out[f"pois/abs_log_ratio_age{age}"] = sums[f"_age{age}_sum"] / max(sums[k], 1.0)
            out[f"pois/max_abs_log_ratio_age{age}"] = sums[f"_age{age}_max"]
            out[f"pois/token_share_age{age}"] = sums[k] / max(n_tokens, 1)  # staleness of the trained tokens
    return out

