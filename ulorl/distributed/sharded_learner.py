"""Data-parallel learner over `torch.distributed`: the same update as one process.

Every rank receives the *whole* batch (token lists are small next to the model),
computes the GRPO advantages over it, and trains its shard of whole groups
(`shard_groups`). The token-mean stays exact: each micro-batch loss is divided by
the all-reduced *global* count of response tokens, so the rank losses add up to the
one-process loss and the summed gradient is the one-process gradient. Then every
rank clips by the global gradient norm and takes the identical AdamW step.

Two ways to hold the model (`sharding`):

- `replicate` (default on CPU; gloo): every rank holds the whole model and the
  whole optimizer state; gradients are summed with one flattened all-reduce per
  dtype after the last micro-batch (DDP-style, without DDP's backward hooks, so
  ranks may run different numbers of micro-batches).
- `fsdp2` (default on CUDA; NCCL): each decoder layer and the backbone are sharded
  with `torch.distributed.fsdp.fully_shard`; FSDP2 reduce-scatters their gradients
  as a *sum* (divide factor 1, forced plain SUM; the loss is already divided by
  the global count). The LM head weight, which the learner uses outside the backbone's forward
  (chunked log-probs), is kept out of FSDP (`ignored_params`; with tied embeddings
  that is the input embedding too) and summed by the all-reduce above. FSDP2
  communicates inside forward/backward, so ranks run in lockstep: shorter shards
  are padded with empty micro-batches and a non-finite loss does not stop the loop.

Sequence parallelism (`train.sequence_parallel` R > 1): consecutive groups of R ranks
share a data shard (`world / R` data-parallel shards); each micro-batch is one sample
whose positions are split over the group (Ulysses all-to-all around attention,
`ulorl.distributed.sequence_parallel`). Every rank of a group computes the same loss on
the gathered log-probs, so token counts are divided by R and one rank per group reports
the metric sums; parameter gradients are summed over all ranks as above (the parts of a
group are disjoint contributions to one sample's gradient).

Tested on CPU (gloo, 2 processes): `replicate` and `fsdp2` give the one-process
weights and metrics to 1e-5; R = 2 (alone, with gradient checkpointing, with FSDP2 and
as 2 data x 2 sequence ranks) gives the one-process gradients, weights and metrics to 1e-5. Not tested: NCCL, GPUs, more than one machine,
mixed precision with FSDP2, and the full-state-dict checkpoint path of `fsdp2`
on GPU (`torch.distributed.checkpoint.state_dict`, written for it but only run on CPU).

Deviations from one process, by design: `actor/micro_batches` is the sum over
ranks and `perf/pad_ratio` pools all ranks' micro-batches; every other metric is
the one-process value. Under torchrun, call `dist.init_process_group()` and build a
`ShardedLearner` on every rank with the same batch; `init_process_group` below is
the explicit-address form used by the Ray learner actors and the tests.
"""

from __future__ import annotations

import dataclasses
import math
import socket
from datetime import timedelta

import torch
import torch.distributed as dist

from ulorl.config import AlgoConfig, ConfigError, TrainConfig
from ulorl.config.distributed import ShardingName
from ulorl.distributed.sequence_parallel import gather_shards, install_ulysses, shard_bounds
from ulorl.distributed.sharding import shard_groups
from ulorl.learners.local import LocalLearner, MicroBatch, advantage_metrics, make_micro_batches, zero_loss_micro_batch
from ulorl.learners.optimizers import load_keeping_settings
from ulorl.trajectory import Trajectory


def free_port() -> int:
    """A TCP port free on this machine now (for a process group's rendezvous)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def init_process_group(rank: int, world_size: int, master_addr: str | None = None, master_port: int | None = None,
                       device: str = "cpu", timeout_s: float = 600.0, *, rendezvous_file: str | None = None) -> None:
    """Join a process group: gloo for CPU training, NCCL for CUDA.

    The ranks meet at an explicit address (`master_addr`, `master_port`), or, when they share a file system,
    through `rendezvous_file`: a path no earlier group has used, which leaves no port to race for."""
    if (rendezvous_file is None) == (master_addr is None or master_port is None):
        raise ValueError("init_process_group: give either master_addr and master_port or rendezvous_file, "
                         f"not {'both' if rendezvous_file is not None else 'neither'}")
    where = f"file://{rendezvous_file}" if rendezvous_file is not None else f"tcp://{master_addr}:{master_port}"
    backend = "nccl" if torch.device(device).type == "cuda" else "gloo"
    dist.init_process_group(backend, init_method=where, rank=rank, world_size=world_size,
                            timeout=timedelta(seconds=timeout_s))


def resolve_sharding(sharding: str, device: str) -> ShardingName:
    """`auto` -> fsdp2 on CUDA, replicate elsewhere."""
    name = ShardingName(sharding)
    if name is ShardingName.AUTO:
        return ShardingName.FSDP2 if torch.device(device).type == "cuda" else ShardingName.REPLICATE
    return name


def apply_fsdp2(model: torch.nn.Module) -> None:
    """Shard the decoder layers and the backbone in place (gradients reduce-scattered as sums).

    The LM head parameters (and the embedding they may be tied to) stay whole on every rank."""
    from torch.distributed.fsdp import fully_shard

    backbone = model.base_model
    head = model.get_output_embeddings()
    head_ids = {id(p) for p in head.parameters()}
    block_names = set(getattr(model, "_no_split_modules", None) or [])
    blocks = [m for m in backbone.modules() if type(m).__name__ in block_names]
    if not blocks:
        raise ValueError(f"fsdp2: found no decoder layers in {type(model).__name__} (its _no_split_modules "
                         f"{sorted(block_names)} name none of its modules); use distributed.sharding=replicate")
    units = []
    for block in blocks:
        units.append(fully_shard(block))
    ignored = {p for p in backbone.parameters() if id(p) in head_ids}
    units.append(fully_shard(backbone, ignored_params=ignored or None))
    for unit in units:  # a plain SUM reduce-scatter (gloo has no PREMUL_SUM; NCCL takes either)
        unit.set_gradient_divide_factor(1.0)
        unit.set_force_sum_reduction_for_comms(True)


def _is_dtensor(t: torch.Tensor) -> bool:
    from torch.distributed.tensor import DTensor

    return isinstance(t, DTensor)


class ShardedLearner(LocalLearner):
    """The `Learner` protocol on one rank of an initialised process group (see the module docstring)."""

    def __init__(self, model: torch.nn.Module, train: TrainConfig, algo: AlgoConfig, temperature: float,
                 pad_id: int, sharding: str = "auto", group: dist.ProcessGroup | None = None) -> None:
        if not dist.is_initialized():
            raise RuntimeError("ShardedLearner needs an initialised process group: call "
                               "ulorl.distributed.init_process_group(...) or run under torchrun with "
                               "torch.distributed.init_process_group()")
        self.group, self.rank, self.world = group, dist.get_rank(group), dist.get_world_size(group)
        self.sharding = resolve_sharding(sharding, train.device)
        self.lockstep = self.sharding is ShardingName.FSDP2
        self._comm_device = torch.device(train.device)
        self.sp = train.sequence_parallel
        if self.world % self.sp:
            raise ConfigError(f"train.sequence_parallel={self.sp} must divide the {self.world} learner ranks")
        self.sp_rank, self.dp_rank, self.dp_world = self.rank % self.sp, self.rank // self.sp, self.world // self.sp
        self.sp_group = None
        if self.sp > 1:  # consecutive ranks form a sequence-parallel group; every rank creates every group
            ranks = dist.get_process_group_ranks(group) if group is not None else list(range(self.world))
            for k in range(self.dp_world):
                g = dist.new_group(ranks[k * self.sp : (k + 1) * self.sp])
                if k == self.dp_rank:
                    self.sp_group = g
            install_ulysses(model, self.sp_group)
        if self.lockstep:
            apply_fsdp2(model)
        super().__init__(model, train, algo, temperature, pad_id)
        self._filler: Trajectory | None = None

    # -- the update: whole-batch advantages, then this rank's shard --------------------------------
    def update(self, trajs: list[Trajectory], version: int, loss_keep: list[bool] | None = None) -> dict[str, float]:
        """`Learner.update` (`ulorl.learners.base`); every rank must pass the same `trajs`."""
        adv = self.advantages(trajs)
        mine = shard_groups(trajs, self.dp_world)[self.dp_rank]  # a sequence-parallel group shares its shard
        self._filler = trajs[0] if trajs else None
        keep = [loss_keep[i] for i in mine] if loss_keep else None
        m = self.update_on([trajs[i] for i in mine], adv[torch.tensor(mine, dtype=torch.long)], version, keep)
        return {**m, **advantage_metrics(adv)}

    def micro_batches(self, trajs: list[Trajectory], advantages: torch.Tensor, version: int,
                      loss_keep: list[bool] | None) -> list[MicroBatch]:
        if self.sp > 1:  # one sample per micro-batch, split over the group's ranks in `forward`
            mbs = [self._on_device(mb) for mb in make_micro_batches(trajs, advantages, version, self.pad_id, 1,
                                                                    loss_keep, packed=True)]
        else:
            mbs = super().micro_batches(trajs, advantages, version, loss_keep)
        if not self.lockstep:
            return mbs
        n = int(self._reduce(torch.tensor([len(mbs)], dtype=torch.float64), dist.ReduceOp.MAX)[0])
        if n > len(mbs) and self._filler is None:
            raise ValueError("fsdp2: a rank has fewer micro-batches than another but no sample to pad with")
        # on the model's device even when this rank has no micro-batch of its own (every sample filtered out)
        fill = [self._on_device(zero_loss_micro_batch(self._filler, version, self.pad_id))
                for _ in range(n - len(mbs))]
        return mbs + fill  # zero tokens: no loss, no gradient, same passes

    # -- sequence parallelism: this rank's positions of the one sample ---------------------------
    def forward(self, mb: MicroBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """`LocalLearner.forward`; with `train.sequence_parallel` R > 1 the backbone and the head run on this
        rank's `ceil(S / R)` positions (`ulorl.distributed.sequence_parallel`) and the `(1, T)` log-probs and
        entropies of the whole sample are gathered, the same on every rank of the group."""
        if self.sp == 1:
            return super().forward(mb)
        mb = self._on_device(mb)
        if mb.input_ids.shape[0] != 1 or (mb.attention_mask is not None and not bool(mb.attention_mask.all())):
            raise ValueError("sequence parallelism takes micro-batches of one unpadded sample")
        S = mb.input_ids.shape[1]
        s = shard_bounds(S, self.sp)
        lo = self.sp_rank * s
        ids = torch.nn.functional.pad(mb.input_ids, (0, s * self.sp - S), value=self.pad_id)[:, lo : lo + s]
        pos = torch.arange(lo, lo + s, device=ids.device)[None]
        hidden = self.body(dataclasses.replace(mb, input_ids=ids, attention_mask=None, position_ids=pos))[0]
        cols = mb.hidden_cols
        sizes = [int(((cols >= k * s) & (cols < (k + 1) * s)).sum()) for k in range(self.sp)]
        mine = (cols >= lo) & (cols < lo + s)
        lp, ent = self.head_flat(hidden[cols[mine] - lo], mb.targets[mine])
        if not sizes[self.sp_rank]:  # no response token here: backward must still reach this shard's backbone
            lp = lp + hidden.sum() * 0
        lp = gather_shards(lp, sizes, self.sp_rank, self.sp_group)
        ent = gather_shards(ent, sizes, self.sp_rank, self.sp_group)
        return self.to_response_layout(mb, lp, ent)

    # -- reductions over ranks -------------------------------------------------------------------
    def _reduce(self, x: torch.Tensor, op=dist.ReduceOp.SUM) -> torch.Tensor:
        y = x.to(self._comm_device).clone()
        dist.all_reduce(y, op=op, group=self.group)
        return y.cpu()

    def _global_sum(self, x: torch.Tensor) -> torch.Tensor:
        return self._reduce(x) / self.sp  # the ranks of a sequence-parallel group count the same samples

    def _all_finite(self, finite: bool) -> bool:
        return bool(self._reduce(torch.tensor([float(finite)]), dist.ReduceOp.MIN)[0] == 1.0)

    def _sync_gradients(self) -> None:
        """Sum the gradients of the parameters FSDP2 does not manage (all of them under `replicate`).

        A parameter that got no gradient on any rank keeps `grad=None`, as in one process (AdamW skips it)."""
        plain = [p for p in self.params if not _is_dtensor(p)]
        has = self._reduce(torch.tensor([float(p.grad is not None) for p in plain]), dist.ReduceOp.MAX)
        live = [p for p, h in zip(plain, has.tolist()) if h]
        for p in live:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        by_dtype: dict[torch.dtype, list[torch.nn.Parameter]] = {}
        for p in live:
            by_dtype.setdefault(p.grad.dtype, []).append(p)
        for ps in by_dtype.values():
            flat = torch.cat([p.grad.reshape(-1) for p in ps])
            dist.all_reduce(flat, group=self.group)
            for p, g in zip(ps, torch.split(flat, [p.numel() for p in ps])):
                p.grad.copy_(g.view_as(p.grad))

    def _grad_norm(self) -> float:
        """Global gradient norm and clipping, the arithmetic of `torch.nn.utils.clip_grad_norm_`."""
        if not self.lockstep:
            return super()._grad_norm()  # every rank holds the whole summed gradient
        grads = [p.grad for p in self.params if p.grad is not None]
        sharded = [g.to_local() for g in grads if _is_dtensor(g)]
        whole = [g for g in grads if not _is_dtensor(g)]
        sq = torch.zeros(1, dtype=torch.float64)
        sq += sum((g.detach().double().pow(2).sum().cpu() for g in sharded), torch.zeros(()))
        sq = self._reduce(sq)
        sq += sum((g.detach().double().pow(2).sum().cpu() for g in whole), torch.zeros(()))
        norm = math.sqrt(float(sq[0]))
        clip = self.train_cfg.grad_clip
        if clip > 0 and math.isfinite(norm):
            coef = min(clip / (norm + 1e-6), 1.0)
            for g in sharded + whole:
                g.mul_(coef)
        return norm

    def _merge_metrics(self, sums: dict[str, float]) -> dict[str, float]:
        parts: list[dict] = [{} for _ in range(self.world)]
        # the ranks of a sequence-parallel group hold the same sums: one of them speaks for the group
        dist.all_gather_object(parts, sums if self.sp_rank == 0 else {}, group=self.group)
        out: dict[str, float] = {}
        for part in parts:
            for k, v in part.items():
                out[k] = max(out.get(k, v), v) if k.endswith("_max") else out.get(k, 0.0) + v
        return out

    # -- state: whole tensors (collectives under fsdp2: call on every rank; rank 0 gets them) -----
    def model_state_dict(self) -> dict[str, torch.Tensor]:
        """The full model state dict on CPU (under fsdp2 on rank 0 only; other ranks get `{}`)."""
        if not self.lockstep:
            return {k: v.detach().cpu() for k, v in self.model.state_dict().items()}
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        return get_model_state_dict(self.model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))

    def state_dict(self) -> dict:
        """`{"optimizer": ...}`: the one-process layout under replicate; under fsdp2 the full state keyed by
        parameter name, on rank 0 only. `load_state_dict` wants it on every rank."""
        if not self.lockstep:
            return super().state_dict()
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

        opts = StateDictOptions(full_state_dict=True, cpu_offload=True)
        return {"optimizer": get_optimizer_state_dict(self.model, self.optimizer, options=opts)}

    def load_state_dict(self, state: dict) -> None:
        if not self.lockstep:
            return super().load_state_dict(state)
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

        load_keeping_settings(self.optimizer, lambda: set_optimizer_state_dict(
            self.model, self.optimizer, state["optimizer"], options=StateDictOptions(full_state_dict=True)))
