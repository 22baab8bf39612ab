"""Ulysses sequence parallelism: R = 2 gloo ranks give the one-process loss and gradients (to 1e-5), also
composed with data parallelism (2 x 2) and FSDP2; heads that do not divide by R are a ConfigError."""

import copy

import pytest
import torch
import torch.multiprocessing as mp
from tests.procs import forkserver_context
from tests.distributed.test_sharded_learner import traj  # the sharded test's two-segment trajectories

from ulorl.config import AlgoConfig, ConfigError, TrainConfig
from ulorl.distributed.sequence_parallel import check_heads, heads_to_seq, seq_to_heads
from ulorl.learners.checkpointing import enable_gradient_checkpointing
from ulorl.learners.local import LocalLearner
from ulorl.models import load_model

ALGO = AlgoConfig(is_mode="sais", entropy_mask="dmmpt", sigma=10.0, tau=0.003)  # clipped ratios, masked tokens


def batch():
    # 2 groups x 2 samples (lengths 13, 18, 24, 29: odd ones are padded to a multiple of R), then a group whose
    # responses (2 and 3 tokens after a 30-token prompt) lie in the last quarter: with R = 2 rank 0's shard
    # predicts no response token and its backbone still gets its gradient through the all-to-alls
    out = [traj(f"g{i}", k, 4 + 3 * i, 9 + 8 * i + 5 * k, seed=10 * i + k, reward=float((i + k) % 2))
           for i in range(2) for k in range(2)]
    out.append(traj("g2", 0, 30, 2, seed=99, reward=1.0))  # 32 tokens, response in the second half only
    out.append(traj("g2", 1, 30, 3, seed=98, reward=0.0))
    return out


def test_heads_not_divisible_name_the_setting():
    class Cfg:
        num_attention_heads, num_key_value_heads = 14, 2

    check_heads(Cfg, 2)
    with pytest.raises(ConfigError, match=r"train.sequence_parallel=4: .*14 attention heads and 2 KV heads.*\[1, 2\]"):
        check_heads(Cfg, 4)


def _rank(rank, world, sp, rendezvous, model_dir, sharding, ckpt, out_path):
    torch.set_num_threads(1)
    import torch.distributed as dist

    from ulorl.distributed.sharded_learner import ShardedLearner, init_process_group

    init_process_group(rank, world, rendezvous_file=rendezvous)
    try:
        model = load_model(model_dir)
        if ckpt:
            enable_gradient_checkpointing(model)
        ln = ShardedLearner(model, TrainConfig(lr=1e-3, grad_clip=0.01, sequence_parallel=sp), ALGO,
                            temperature=0.85, pad_id=0, sharding=sharding)
        # the two all-to-alls are inverse permutations (B 1, H 4, s 3, D 2)
        x = torch.randn(1, 4, 3, 2, generator=torch.Generator().manual_seed(rank))
        y = heads_to_seq(x, ln.sp_group)
        assert y.shape == (1, 4 // sp, 3 * sp, 2) and torch.equal(seq_to_heads(y, ln.sp_group), x)
        trajs = batch()
        seen, step = [], ln.optimizer.step
        ln.optimizer.step = lambda: (seen.append({n: p.grad.clone() for n, p in ln.model.named_parameters()
                                                  if p.grad is not None and not hasattr(p.grad, "to_local")}),
                                     step())
        metrics = [ln.update(trajs, 2, loss_keep=[i != 1 for i in range(len(trajs))]), ln.update(trajs, 3)]
        state = ln.model_state_dict()
        torch.save({"metrics": metrics, "state": state, "grads": seen}, f"{out_path}.{rank}")
    finally:
        dist.destroy_process_group()


def run_ranks(tmp_path, model_dir, world, sp, sharding="replicate", ckpt=False):
    out = tmp_path / f"sp{sp}_{world}_{sharding}.pt"
    forkserver_context()  # preloads the forkserver that start_method="forkserver" starts (tests/procs.py)
    mp.start_processes(_rank, args=(world, sp, f"{out}.rendezvous", str(model_dir), sharding, ckpt, str(out)),
                       nprocs=world, start_method="forkserver")
    return [torch.load(f"{out}.{r}", weights_only=False) for r in range(world)]


def one_process(model_dir):
    ln = LocalLearner(load_model(model_dir), TrainConfig(lr=1e-3, grad_clip=0.01), copy.deepcopy(ALGO),
                      temperature=0.85, pad_id=0)
    seen, step = [], ln.optimizer.step
    ln.optimizer.step = lambda: (seen.append({n: p.grad.clone() for n, p in ln.model.named_parameters()
                                              if p.grad is not None}), step())
    trajs = batch()
    metrics = [ln.update(trajs, 2, loss_keep=[i != 1 for i in range(len(trajs))]), ln.update(trajs, 3)]
    return metrics, seen, ln


PER_RANK = ("actor/micro_batches", "perf/pad_ratio")  # one sample per micro-batch, padded to a multiple of R


@pytest.mark.parametrize("world,sp,sharding,ckpt", [(2, 2, "replicate", False), (2, 2, "replicate", True),
                                                    (4, 2, "replicate", False), (2, 2, "fsdp2", False)])
def test_sequence_parallel_equals_one_process(tmp_path, tiny_model_dir, world, sp, sharding, ckpt):
    ranks = run_ranks(tmp_path, tiny_model_dir, world, sp, sharding, ckpt)
    want_metrics, want_grads, ln = one_process(tiny_model_dir)
    assert want_metrics[0]["actor/pg_clipfrac"] > 0 and want_metrics[1]["actor/dmmpt_mask_ratio"] > 0
    for r, got in enumerate(ranks):
        for m_got, m_want in zip(got["metrics"], want_metrics):
            assert m_got["actor/skipped"] == 0.0
            for k in set(m_want) - set(PER_RANK):
                assert m_got[k] == pytest.approx(m_want[k], rel=1e-5, abs=1e-6), k
        if sharding == "replicate":  # the summed, clipped gradient each rank steps with
            for g_got, g_want in zip(got["grads"], want_grads):
                assert set(g_got) == set(g_want)
                for k, v in g_want.items():
                    assert torch.allclose(g_got[k], v, rtol=1e-5, atol=1e-7), k
        if sharding == "fsdp2" and r > 0:
            continue
        for k, v in ln.model.state_dict().items():
            assert torch.allclose(got["state"][k], v, atol=1e-5, rtol=0), k
