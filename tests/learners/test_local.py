"""LocalLearner: chunked log-probs, IS modes on real trajectories, micro-batch invariance, NaN guard."""

import copy
import math

import pytest
import torch

from ulorl.config import AlgoConfig, TrainConfig
from ulorl.algo.logprobs import chunked_logprobs_entropy
from ulorl.learners import Learner, local
from ulorl.learners.local import LocalLearner, make_micro_batches
from ulorl.models import load_model
from ulorl.trajectory import Trajectory


def naive(hidden, weight, targets, temperature):
    logits = (hidden @ weight.T).float() / temperature  # the full (N, V) tensor
    logp = torch.log_softmax(logits, -1)
    ent = -(logp.exp() * logp).sum(-1)
    return logp.gather(-1, targets[:, None]).squeeze(-1), ent


def test_chunked_equals_unchunked_values_and_grads():
    torch.manual_seed(0)
    N, H, V = 300, 16, 500
    h1 = torch.randn(N, H, requires_grad=True)
    w1 = torch.randn(V, H, requires_grad=True)
    tgt = torch.randint(V, (N,))
    h2, w2 = h1.detach().clone().requires_grad_(), w1.detach().clone().requires_grad_()
    lp_c, ent_c = chunked_logprobs_entropy(h1, w1, tgt, temperature=0.85, chunk=64)
    lp_n, ent_n = naive(h2, w2, tgt, 0.85)
    assert torch.allclose(lp_c, lp_n, atol=1e-5) and torch.allclose(ent_c, ent_n, atol=1e-5)
    (lp_c * torch.linspace(-1, 1, N)).sum().backward()
    (lp_n * torch.linspace(-1, 1, N)).sum().backward()
    assert torch.allclose(h1.grad, h2.grad, atol=1e-5) and torch.allclose(w1.grad, w2.grad, atol=1e-5)


def test_chunked_path_never_keeps_full_logits():
    # record every tensor autograd saves for backward: with chunking + recomputation, nothing of size
    # N x V is kept; the largest saved tensor is independent of N.
    def max_saved(N, chunk):
        torch.manual_seed(0)
        h = torch.randn(N, 8, requires_grad=True)
        w = torch.randn(1000, 8, requires_grad=True)
        sizes = []

        def pack(t):
            sizes.append(t.numel())
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            lp, _ = chunked_logprobs_entropy(h, w, torch.randint(1000, (N,)), chunk=chunk)
        lp.sum().backward()
        return max(sizes)

    V = 1000
    small, large = max_saved(256, 64), max_saved(4096, 64)
    assert large < 4096 * V / 4  # far below the naive (N, V) logits
    assert large == small  # does not grow with N


def traj(i, group, prompt, response, blp, versions, reward):
    t = Trajectory(sample_id=f"{group}/{i}", group_id=group, prompt_id=0, prompt_tokens=prompt, ground_truth="0",
                   data_source="t", reward=reward, stop_reason="eos")
    start = 0
    for v, n in versions:
        t.append_segment(response[start : start + n], blp[start : start + n], v)
        start += n
    return t


@pytest.fixture
def batch():
    g = torch.Generator().manual_seed(1)
    out = []
    for i in range(4):
        n = 6 + 3 * i
        resp = torch.randint(5, 300, (n,), generator=g).tolist()
        blp = (-torch.rand(n, generator=g) * 3).tolist()  # behaviour log-probs far from the current policy
        out.append(traj(i, f"g{i // 2}", [3, 20, 21, 6], resp, blp, [(0, n // 2), (1, n - n // 2)],
                        reward=float(i % 2)))
    return out


def learner(model_dir, **algo):
    model = load_model(model_dir)
    return LocalLearner(model, TrainConfig(lr=1e-3, micro_batch_tokens=10_000), AlgoConfig(**algo),
                        temperature=0.85, pad_id=0)


def current_logprobs(ln, trajs, version):
    mb = make_micro_batches(trajs, torch.zeros(len(trajs)), version, 0, 10_000)[0]
    with torch.no_grad():
        lp, _ = ln.forward(mb)
    return lp, mb


def test_pois_ratio_is_one_and_sais_uses_stored_behaviour_logprobs(tiny_model_dir, batch):
    ln = learner(tiny_model_dir, is_mode="pois", entropy_mask="none")
    m = ln.update(batch, version=2)
    assert m["actor/ratio_mean"] == 1.0 and m["actor/pg_clipfrac"] == 0.0 and m["actor/ppo_kl"] == 0.0

    ln = learner(tiny_model_dir, is_mode="sais", entropy_mask="none")
    lp, mb = current_logprobs(ln, batch, 2)
    mask = mb.response_mask
    expected = torch.exp(lp - mb.behaviour_logprobs)[mask].mean().item()  # pi_theta / pi_behaviour per token
    m = ln.update(batch, version=2)
    assert m["actor/ratio_mean"] == pytest.approx(expected, rel=1e-5)
    assert m["actor/pg_clipfrac"] > 0  # drifted ratios get clipped under SAIS
    # POIS bias diagnostic: tokens of version 0 are 2 versions old, of version 1 one version old
    assert set(k for k in m if k.startswith("pois/abs_log_ratio_age")) == {"pois/abs_log_ratio_age1",
                                                                         "pois/abs_log_ratio_age2"}


def test_micro_batches_give_the_full_batch_update(tiny_model_dir, batch):
    a = learner(tiny_model_dir, is_mode="pois", entropy_mask="dmmpt", sigma=10.0)
    b = copy.deepcopy(a)
    b.train_cfg = TrainConfig(lr=1e-3, micro_batch_tokens=24, packing=False)  # one sequence per micro-batch
    # plain SGD with lr 1 makes the weight change equal to the gradient (Adam's g/|g| would amplify
    # float round-off of near-zero gradient entries)
    for ln in (a, b):
        ln.optimizer = torch.optim.SGD(ln.params, lr=1.0)
    ma, mb_ = a.update(batch, 1), b.update(batch, 1)
    assert ma["actor/micro_batches"] == 1 and mb_["actor/micro_batches"] == 4
    assert ma["actor/grad_norm"] == pytest.approx(mb_["actor/grad_norm"], rel=1e-5)
    for pa, pb in zip(a.model.parameters(), b.model.parameters()):
        assert torch.allclose(pa, pb, atol=1e-6)


def test_local_learner_is_a_learner_and_reports_its_lr(tiny_model_dir, batch):
    ln = learner(tiny_model_dir)
    assert isinstance(ln, Learner)  # the protocol the trainer, the session and the placements rely on
    assert ln.update(batch, 0)["actor/lr"] == pytest.approx(1e-3)


def nan_policy_loss(monkeypatch):
    """Make the loss the learner computes NaN (the clipped loss of `ulorl.algo`, as the learner calls it)."""
    real = local.policy_loss

    def nan_loss(*args, **kw):
        loss, m = real(*args, **kw)
        return loss * float("nan"), m

    monkeypatch.setattr(local, "policy_loss", nan_loss)


def test_nan_loss_skips_update_and_leaves_weights_untouched(tiny_model_dir, batch, monkeypatch):
    ln = learner(tiny_model_dir)
    ln.update(batch, 0)  # one good step so the optimizer has state
    before = {k: v.clone() for k, v in ln.model.state_dict().items()}
    opt_before = copy.deepcopy(ln.optimizer.state_dict())
    nan_policy_loss(monkeypatch)
    m = ln.update(batch, 1)
    assert m["actor/skipped"] == 1.0 and math.isnan(m["actor/grad_norm"])
    for k, v in ln.model.state_dict().items():
        assert torch.equal(v, before[k])
    after = ln.optimizer.state_dict()
    assert after["state"].keys() == opt_before["state"].keys()
    for k in after["state"]:
        assert torch.equal(after["state"][k]["exp_avg"], opt_before["state"][k]["exp_avg"])
        assert after["state"][k]["step"] == opt_before["state"][k]["step"]


def test_filtered_samples_contribute_no_tokens(tiny_model_dir, batch):
    ln = learner(tiny_model_dir)
    m_all = ln.update(batch, 0)
    m_keep = learner(tiny_model_dir).update(batch, 0, loss_keep=[True, False, True, True])
    assert m_all["actor/response_tokens"] - m_keep["actor/response_tokens"] == batch[1].response_len


def test_filtered_samples_are_left_out_of_the_passes_with_the_same_update(tiny_model_dir, batch, monkeypatch):
    # loop-vs-optimised: the filtered sample used to go through forward and backward with an all-False response
    # mask; it is now left out of the micro-batches. The gradient and the metrics must be the same.
    keep = [True, False, True, True]
    mbs = make_micro_batches(batch, torch.ones(4), 0, 0, 10_000, loss_keep=keep)
    assert sum(mb.input_ids.shape[0] for mb in mbs) == 3 and all(mb.response_mask.any(-1).all() for mb in mbs)
    assert make_micro_batches(batch, torch.ones(4), 0, 0, 10_000, loss_keep=[False] * 4) == []

    def grads_at_step(ln):  # the gradient the optimizer steps with
        seen, step = [], ln.optimizer.step
        ln.optimizer.step = lambda: (seen.extend(p.grad.clone() for p in ln.params), step())
        return seen

    fast = learner(tiny_model_dir)
    fast.train_cfg = TrainConfig(lr=1e-3, micro_batch_tokens=10_000, packing=False)  # the reference's layout
    g_fast = grads_at_step(fast)
    m_fast = fast.update(batch, 0, loss_keep=keep)
    ref = learner(tiny_model_dir)
    g_ref = grads_at_step(ref)
    monkeypatch.setattr(ref, "micro_batches", lambda trajs, adv, version, keep_: [
        local._collate(trajs, adv, version, 0, keep_)])  # every row, the filtered one masked: the old path
    m_ref = ref.update(batch, 0, loss_keep=keep)
    assert m_fast["actor/micro_batches"] == m_ref["actor/micro_batches"] == 1
    for k in ("actor/response_tokens", "actor/entropy", "actor/pg_loss", "actor/grad_norm"):
        assert m_fast[k] == pytest.approx(m_ref[k], rel=1e-5, abs=1e-7), k
    assert len(g_fast) == len(g_ref) == len(fast.params)
    for a, b in zip(g_fast, g_ref):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-8)
    for a, b in zip(fast.params, ref.params):  # (Adam turns float noise in a ~0 gradient into ~lr-sized steps)
        assert torch.allclose(a, b, atol=1e-5)


def test_update_with_every_sample_filtered_changes_nothing(tiny_model_dir, batch):
    ln = learner(tiny_model_dir)
    ln.update(batch, 0)  # the optimizer has state
    before = {k: v.clone() for k, v in ln.model.state_dict().items()}
    steps = [st["step"] for st in ln.optimizer.state_dict()["state"].values()]
    m = ln.update(batch, 1, loss_keep=[False] * 4)
    assert m["actor/micro_batches"] == 0 and m["actor/grad_norm"] == 0.0
    for k, v in ln.model.state_dict().items():
        assert torch.equal(v, before[k]), k
    assert [st["step"] for st in ln.optimizer.state_dict()["state"].values()] == steps


def test_split_sorted_fewest_micro_batches_then_least_padding():
    from ulorl.learners.micro_batch import split_sorted

    def greedy(lengths, budget):  # the fill split_sorted replaced: as many rows as fit, longest first
        runs = []
        for i, n in enumerate(lengths):
            if runs and (i - runs[-1][0] + 1) * lengths[runs[-1][0]] <= budget:
                runs[-1][1] = i + 1
            else:
                runs.append([i, i + 1])
        return runs

    def padded(lengths, runs):
        return sum((hi - lo) * lengths[lo] for lo, hi in runs)

    g = torch.Generator().manual_seed(0)
    for _ in range(200):
        lengths = sorted((torch.randint(1, 60, (int(torch.randint(1, 30, (1,), generator=g)),), generator=g)).tolist(),
                         reverse=True)
        budget = int(torch.randint(1, 400, (1,), generator=g))
        runs = split_sorted(lengths, budget)
        assert [i for lo, hi in runs for i in range(lo, hi)] == list(range(len(lengths)))  # contiguous, in order
        assert all(hi - lo == 1 or (hi - lo) * lengths[lo] <= budget for lo, hi in runs)
        ref = greedy(lengths, budget)
        assert len(runs) == len(ref) and padded(lengths, runs) <= padded(lengths, ref)
    assert split_sorted([], 10) == [] and split_sorted([50, 5], 10) == [(0, 1), (1, 2)]
    assert split_sorted([10, 6, 6, 6], 20) == [(0, 1), (1, 4)]  # greedy: [10, 6], [6, 6] pads 32 tokens, not 28


def _changed_fraction(model, before):
    changed = sum(int((p.detach().float() != before[n].float()).sum()) for n, p in model.named_parameters())
    return changed / sum(p.numel() for p in model.parameters())


def test_autocast_keeps_float32_master_weights_where_bfloat16_weights_lose_small_updates(tiny_model_dir, batch):
    # lr 1e-6 (the paper's): Adam moves every weight by ~1e-6, far below bfloat16's spacing near 0.02 (~1.2e-4)
    def run(dtype, autocast):
        model = load_model(tiny_model_dir).to(dtype)
        ln = LocalLearner(model, TrainConfig(lr=1e-6, autocast=autocast), AlgoConfig(entropy_mask="none"),
                          temperature=0.85, pad_id=0)
        with torch.no_grad():
            lp_ref, _ = ln.forward(make_micro_batches(batch, torch.ones(4), 0, 0, 10_000)[0])
        before = {n: p.detach().clone() for n, p in model.named_parameters()}
        m = ln.update(batch, 0)
        assert m["actor/skipped"] == 0.0
        return _changed_fraction(model, before), lp_ref

    mixed, lp_mixed = run(torch.float32, "bfloat16")
    pure_bf16, _ = run(torch.bfloat16, "none")
    _, lp_fp32 = run(torch.float32, "none")
    assert mixed > 0.9  # float32 master weights take the update
    assert pure_bf16 < 0.5  # most bfloat16 weights do not move at all
    mask = make_micro_batches(batch, torch.ones(4), 0, 0, 10_000)[0].response_mask
    assert lp_mixed.dtype == torch.float32  # the head runs in the weights' dtype
    assert torch.allclose(lp_mixed[mask], lp_fp32[mask], atol=0.1)  # bf16 backbone: close, not equal
    assert not torch.equal(lp_mixed[mask], lp_fp32[mask])  # and the backbone did run in bfloat16
