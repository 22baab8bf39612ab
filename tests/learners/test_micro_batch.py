"""Micro-batch layouts: packed rows (0% padding) give the padded path's loss and gradient; activation offload
and gradient checkpointing leave the gradient unchanged."""

import copy

import pytest
import torch

from ulorl.config import AlgoConfig, TrainConfig
from ulorl.learners.checkpointing import enable_gradient_checkpointing
from ulorl.learners.local import LocalLearner
from ulorl.learners.micro_batch import collate_packed, make_micro_batches, pack_first_fit
from ulorl.learners.offload import activation_offload_enabled, enable_activation_offload
from ulorl.models import load_model
from ulorl.trajectory import Trajectory


def traj(i, prompt_len, n, seed, reward):
    g = torch.Generator().manual_seed(seed)
    t = Trajectory(sample_id=f"g{i // 2}/{i}", group_id=f"g{i // 2}", prompt_id=0,
                   prompt_tokens=[3] + [20 + i] * (prompt_len - 1), ground_truth="0", data_source="t",
                   reward=reward, stop_reason="eos")
    resp = torch.randint(5, 300, (n,), generator=g).tolist()
    blp = (-torch.rand(n, generator=g) * 3).tolist()
    t.append_segment(resp[: n // 2], blp[: n // 2], 0)
    t.append_segment(resp[n // 2 :], blp[n // 2 :], 1)
    return t


@pytest.fixture
def batch():
    # prompt + response lengths: 4+6=10, 5+17=22, 4+9=13, 6+30=36, 4+3=7, 5+12=17
    spec = [(4, 6), (5, 17), (4, 9), (6, 30), (4, 3), (5, 12)]
    return [traj(i, p, n, seed=i, reward=float(i % 2)) for i, (p, n) in enumerate(spec)]


def test_pack_first_fit_by_hand():
    # longest first: 36 > 32 alone; 22 opens row 1 (free 10); 17 opens row 2 (free 15); 13 -> row 2 (free 2);
    # 10 -> row 1 (free 0); 7 opens row 3
    assert pack_first_fit([36, 22, 17, 13, 10, 7], 32) == [[0], [1, 4], [2, 3], [5]]
    assert pack_first_fit([], 32) == []


def test_collate_packed_positions_and_indices(batch):
    a, b = batch[0], batch[4]  # lengths 10 (prompt 4, response 6) and 7 (prompt 4, response 3)
    mb = collate_packed([a, b], torch.tensor([1.0, -1.0]), 1, 0, None)
    assert mb.input_ids.shape == (1, 17) and mb.pad_tokens == 0 and mb.packed
    assert mb.input_ids[0].tolist() == a.prompt_tokens + a.response_tokens + b.prompt_tokens + b.response_tokens
    assert mb.position_ids[0].tolist() == list(range(10)) + list(range(7))
    # a's response tokens sit at columns 4..9 and are predicted from 3..8; b starts at column 10: 13..15 from 13..15
    assert mb.hidden_cols.tolist() == list(range(3, 9)) + list(range(13, 16))
    assert mb.sample_rows.tolist() == [0] * 6 + [1] * 3 and mb.target_cols.tolist() == list(range(6)) + list(range(3))
    assert mb.response_mask.shape == (2, 6) and mb.response_mask.sum() == 9


def grads_and_metrics(ln, batch, keep=None):
    seen, step = [], ln.optimizer.step
    ln.optimizer.step = lambda: (seen.extend(p.grad.clone() for p in ln.params), step())
    m = ln.update(batch, 2, loss_keep=keep)
    return seen, m


def learner(model_dir, attn="sdpa", **train):
    model = load_model(model_dir)
    model.set_attn_implementation(attn)
    return LocalLearner(model, TrainConfig(lr=1e-3, **train),
                        AlgoConfig(is_mode="sais", entropy_mask="dmmpt", sigma=10.0), temperature=0.85, pad_id=0)


# several packed rows (and one sample over the budget) or one row; sdpa: attention per sample
# (ulorl.learners.varlen), eager: transformers' dense block-causal mask from the restarting position ids
@pytest.mark.parametrize("budget,attn", [(32, "sdpa"), (10_000, "sdpa"), (32, "eager")])
def test_packed_gradient_equals_padded(tiny_model_dir, batch, budget, attn, monkeypatch):
    keep = [True, True, False, True, True, True]
    g_pad, m_pad = grads_and_metrics(learner(tiny_model_dir, attn, micro_batch_tokens=budget, packing=False), batch,
                                     keep)
    packed = learner(tiny_model_dir, attn, micro_batch_tokens=budget, packing=True)
    assert packed._varlen == (attn == "sdpa")
    assert packed.model.config._attn_implementation == ("ulorl_varlen" if attn == "sdpa" else "eager")
    from transformers import masking_utils

    masks, packed_rows = [], []
    real_mask, real_find = masking_utils.sdpa_mask, masking_utils.find_packed_sequence_indices
    monkeypatch.setattr(masking_utils, "sdpa_mask", lambda *a, **k: (masks.append(1), real_mask(*a, **k))[1])
    monkeypatch.setattr(masking_utils, "find_packed_sequence_indices",
                        lambda p: (packed_rows.append(real_find(p) is not None), real_find(p))[1])
    g_pack, m_pack = grads_and_metrics(packed, batch, keep)
    if attn == "sdpa":  # a row of several samples builds no mask; the one-sample row [36] asks sdpa_mask (causal)
        assert len(masks) == {32: 1, 10_000: 0}[budget]
    else:  # the fallback reads the packed rows from the position ids (a dense block-causal mask)
        assert any(packed_rows)
    assert m_pack["perf/pad_ratio"] == 0.0 and m_pad["perf/pad_ratio"] > 0
    if budget == 32:  # kept lengths 36, 22, 17, 10, 7 -> rows [36], [22, 10], [17, 7]
        assert m_pack["actor/micro_batches"] == 3
    for k in ("actor/entropy", "actor/pg_loss", "actor/grad_norm", "actor/dmmpt_mask_ratio", "actor/ratio_mean"):
        assert m_pack[k] == pytest.approx(m_pad[k], rel=1e-5, abs=1e-7), k
    assert len(g_pack) == len(g_pad)
    for a, b in zip(g_pack, g_pad):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-7)


def test_packed_rows_attend_within_their_sample(tiny_model_dir, batch):
    ln = learner(tiny_model_dir)
    with torch.no_grad():
        alone = [ln.forward(make_micro_batches([t], torch.zeros(1), 2, 0, 10_000, packed=True)[0])[0][0]
                 for t in batch[:3]]
        together = ln.forward(make_micro_batches(batch[:3], torch.zeros(3), 2, 0, 10_000, packed=True)[0])[0]
    for t, lp in zip(batch[:3], alone):  # `together` is in length order: 22, 13, 10 tokens = batch 1, 2, 0
        row = [1, 2, 0].index(batch.index(t))
        assert torch.allclose(together[row, : t.response_len], lp[: t.response_len], atol=1e-5)


@pytest.mark.parametrize("checkpointing", [False, True])
def test_activation_offload_and_checkpointing_keep_the_gradient(tiny_model_dir, batch, checkpointing, monkeypatch):
    entered = []
    real = torch.autograd.graph.save_on_cpu
    monkeypatch.setattr(torch.autograd.graph, "save_on_cpu", lambda **kw: (entered.append(kw), real(**kw))[1])
    ref = learner(tiny_model_dir, micro_batch_tokens=32)
    other = learner(tiny_model_dir, micro_batch_tokens=32)
    enable_activation_offload(other.model)
    enable_activation_offload(other.model)  # idempotent: one pair of hooks
    assert activation_offload_enabled(other.model) and not activation_offload_enabled(ref.model)
    assert len(other.model.base_model._forward_pre_hooks) == 1
    if checkpointing:
        enable_gradient_checkpointing(other.model)
    g_other, m_other = grads_and_metrics(other, batch)
    g_ref, m_ref = grads_and_metrics(ref, batch)
    # one save_on_cpu context per micro-batch forward, each left again
    assert len(entered) == m_other["actor/micro_batches"] and other.model.base_model._ulorl_offload._ctx == []
    assert m_other["actor/grad_norm"] == pytest.approx(m_ref["actor/grad_norm"], rel=1e-5)
    for a, b in zip(g_other, g_ref):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-7)
    copy.deepcopy(other.model)  # the hooks do not stop the model from being copied (the process learner pickles)




def test_varlen_is_installed_only_where_per_sample_attention_is_the_same():
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from ulorl.learners.varlen import install_varlen

    kw = dict(vocab_size=50, hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
              num_key_value_heads=1, head_dim=8, attn_implementation="sdpa")
    torch.manual_seed(0)
    plain = Qwen3ForCausalLM(Qwen3Config(**kw, pad_token_id=0)).eval()
    ids = torch.tensor([[0, 0, 5, 6, 7], [3, 4, 5, 6, 7]])  # a left-padded row: the engines' masks still apply
    with torch.no_grad():
        before = plain.generate(input_ids=ids, attention_mask=(ids != 0).long(), max_new_tokens=6, do_sample=False)
    assert install_varlen(plain) and plain.config._attn_implementation == "ulorl_varlen"
    with torch.no_grad():
        after = plain.generate(input_ids=ids, attention_mask=(ids != 0).long(), max_new_tokens=6, do_sample=False)
    assert torch.equal(before, after)  # without cu_seq_lens_q it is sdpa with transformers' own mask
    sliding = Qwen3ForCausalLM(Qwen3Config(**kw, use_sliding_window=True, sliding_window=4, max_window_layers=0))
    assert "sliding_attention" in sliding.config.layer_types
    assert not install_varlen(sliding) and sliding.config._attn_implementation == "sdpa"  # the dense mask instead
