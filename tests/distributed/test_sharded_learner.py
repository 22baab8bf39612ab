"""Sharded learner: two gloo processes make the same update as one process (to 1e-5)."""

import copy

import pytest
import torch
import torch.multiprocessing as mp
from tests.procs import forkserver_context

from ulorl.config import AlgoConfig, TrainConfig
from ulorl.distributed import shard_groups
from ulorl.learners.local import LocalLearner
from ulorl.models import load_model
from ulorl.trajectory import Trajectory

TRAIN = TrainConfig(lr=1e-3, micro_batch_tokens=40, grad_clip=0.01)  # several micro-batches per rank; clip active
ALGO = AlgoConfig(is_mode="sais", entropy_mask="dmmpt", sigma=10.0, tau=0.003)  # clipped ratios and masked tokens


def traj(group, k, prompt_len, n, seed, reward):
    g = torch.Generator().manual_seed(seed)
    t = Trajectory(sample_id=f"{group}/{k}", group_id=group, prompt_id=0, prompt_tokens=[3] + [20] * (prompt_len - 1),
                   ground_truth="0", data_source="t", reward=reward, stop_reason="eos")
    resp = torch.randint(5, 300, (n,), generator=g).tolist()
    blp = (-torch.rand(n, generator=g) * 3).tolist()
    t.append_segment(resp[: n // 2], blp[: n // 2], 0)
    t.append_segment(resp[n // 2 :], blp[n // 2 :], 1)
    return t


def batch(num_groups):
    """`num_groups` groups of 3 samples with uneven lengths (so shards differ in size and micro-batch count)."""
    return [traj(f"g{i}", k, 4 + i, 5 + 4 * i + 3 * k, seed=10 * i + k, reward=float((i + k) % 2))
            for i in range(num_groups) for k in range(3)]


def test_shard_groups_keeps_groups_whole_and_balances_tokens():
    trajs = batch(3)
    # tokens per group (prompt 4+i, responses 5+4i+3k for k=0..2): g0 = 3*4 + 5+8+11 = 36,
    # g1 = 3*5 + 9+12+15 = 51, g2 = 3*6 + 13+16+19 = 66 -> LPT: g2 -> rank 0, g1 -> rank 1, g0 -> rank 1 (51 < 66)
    assert shard_groups(trajs, 2) == [[6, 7, 8], [0, 1, 2, 3, 4, 5]]
    assert shard_groups(trajs, 1) == [list(range(9))]
    assert shard_groups(trajs[:3], 2) == [[0, 1, 2], []]  # fewer groups than ranks: rank 1 trains nothing
    with pytest.raises(ValueError):
        shard_groups(trajs, 0)


def test_a_group_meets_at_an_address_or_a_file_not_both():
    from ulorl.distributed.sharded_learner import init_process_group

    with pytest.raises(ValueError, match="master_addr and master_port or rendezvous_file, not neither"):
        init_process_group(0, 2, "127.0.0.1")  # no port
    with pytest.raises(ValueError, match="not both"):
        init_process_group(0, 2, "127.0.0.1", 29500, rendezvous_file="/tmp/x")


def _rank(rank, world, rendezvous, model_dir, sharding, num_groups, out_path):
    torch.set_num_threads(1)
    from ulorl.distributed.sharded_learner import ShardedLearner, init_process_group

    init_process_group(rank, world, rendezvous_file=rendezvous)
    try:
        ln = ShardedLearner(load_model(model_dir), TRAIN, ALGO, temperature=0.85, pad_id=0, sharding=sharding)
        trajs = batch(num_groups)
        keep = [i != 1 for i in range(len(trajs))]
        metrics = [ln.update(trajs, 2, loss_keep=keep), ln.update(trajs, 3)]
        if rank == 0:  # a NaN loss on rank 0 only (this rank's process): every rank must skip the update
            from ulorl.learners import local

            real = local.policy_loss

            def nan_loss(*args, **kw):
                loss, m = real(*args, **kw)
                return loss * float("nan"), m

            local.policy_loss = nan_loss
        metrics.append(ln.update(trajs, 4))
        state, opt = ln.model_state_dict(), ln.state_dict()  # collectives under fsdp2: every rank calls them
        torch.save({"metrics": metrics, "state": state, "opt": opt}, f"{out_path}.{rank}")
    finally:
        import torch.distributed as dist

        dist.destroy_process_group()


def run_ranks(tmp_path, model_dir, sharding, num_groups, world=2):
    """What each rank saw and ended with: [rank 0, rank 1]."""
    out = tmp_path / f"{sharding}_{num_groups}.pt"
    forkserver_context()  # preloads the forkserver that start_method="forkserver" starts (tests/procs.py)
    mp.start_processes(_rank, args=(world, f"{out}.rendezvous", str(model_dir), sharding, num_groups, str(out)),
                       nprocs=world, start_method="forkserver")
    return [torch.load(f"{out}.{r}", weights_only=False) for r in range(world)]


def one_process(model_dir, num_groups):
    ln = LocalLearner(load_model(model_dir), copy.deepcopy(TRAIN), ALGO, temperature=0.85, pad_id=0)
    trajs = batch(num_groups)
    metrics = [ln.update(trajs, 2, loss_keep=[i != 1 for i in range(len(trajs))]), ln.update(trajs, 3)]
    return metrics, ln


PER_RANK = ("actor/micro_batches", "perf/pad_ratio")  # by design: summed / pooled over the ranks' micro-batches


# one group on two ranks: rank 1 trains nothing (replicate: no gradient; fsdp2: padded with empty micro-batches)
@pytest.mark.parametrize("sharding,num_groups", [("replicate", 3), ("replicate", 1), ("fsdp2", 3), ("fsdp2", 1)])
def test_two_gloo_ranks_equal_one_process(tmp_path, tiny_model_dir, sharding, num_groups):
    ranks = run_ranks(tmp_path, tiny_model_dir, sharding, num_groups)
    want_metrics, ln = one_process(tiny_model_dir, num_groups)
    for got in ranks:
        for m_got, m_want in zip(got["metrics"], want_metrics):
            assert m_got["actor/skipped"] == 0.0 and m_want["actor/pg_clipfrac"] > 0
            assert set(m_got) == set(m_want)
            for k in set(m_want) - set(PER_RANK):
                assert m_got[k] == pytest.approx(m_want[k], rel=1e-5, abs=1e-6), k
        assert got["metrics"][2]["actor/skipped"] == 1.0  # rank 0's NaN loss skipped the update on both ranks
        if sharding == "fsdp2" and got is ranks[1]:
            assert got["state"] == {}  # full state dicts are gathered on rank 0
            continue
        # two AdamW steps of lr 1e-3 (then the skipped one): each rank holds the one-process weights
        want = ln.model.state_dict()
        assert set(got["state"]) == set(want)
        for k, v in want.items():
            assert torch.allclose(got["state"][k], v, atol=1e-5, rtol=0), k
        # replicate: the optimizer state is the one-process state (fsdp2's full state dict is keyed by name)
        if sharding == "replicate":
            for i, st in ln.optimizer.state_dict()["state"].items():
                assert torch.allclose(got["opt"]["optimizer"]["state"][i]["exp_avg"], st["exp_avg"], atol=1e-6)
    assert max(m["actor/grad_norm"] for m in want_metrics) > TRAIN.grad_clip  # clipping (by the global norm) is active
    assert want_metrics[1]["actor/dmmpt_mask_ratio"] > 0  # masked tokens (counted in the global denominator)
