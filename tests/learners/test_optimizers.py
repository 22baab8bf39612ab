"""`train.optimizer`: the learner's first step under SGD and AdamW, against the step computed by hand from the
batch's gradient (SGD: -lr g; AdamW's first step: -lr g / (|g| + eps), i.e. -lr sign(g) at the default eps)."""

import copy

import pytest
import torch

from ulorl.config import AlgoConfig, ConfigError, TrainConfig
from ulorl.learners.local import LocalLearner
from ulorl.learners.optimizers import OPTIMIZERS, OptimizerName
from ulorl.models import load_model
from ulorl.trajectory import Trajectory


@pytest.fixture
def batch():
    g = torch.Generator().manual_seed(3)
    out = []
    for i in range(4):
        n = 5 + 2 * i
        t = Trajectory(sample_id=f"g{i // 2}/{i}", group_id=f"g{i // 2}", prompt_id=0, prompt_tokens=[3, 20, 21],
                       ground_truth="0", data_source="t", reward=float(i % 2), stop_reason="eos")
        t.append_segment(torch.randint(5, 300, (n,), generator=g).tolist(), [-1.0] * n, 0)
        out.append(t)
    return out


def make(model, **train):
    return LocalLearner(model, TrainConfig(micro_batch_tokens=10_000, grad_clip=0.0, **train),
                        AlgoConfig(is_mode="pois", entropy_mask="none"), temperature=0.85, pad_id=0)


def step(ln, batch):
    before = [p.detach().clone() for p in ln.params]
    ln.update(batch, 0)
    return [p.detach() - b for p, b in zip(ln.params, before)]


@pytest.fixture
def grads(tiny_model_dir, batch):
    """The batch's gradient, as the optimizer's step sees it."""
    model = load_model(tiny_model_dir)
    ln = make(copy.deepcopy(model), optimizer="sgd", lr=1.0)
    seen = []
    ln.optimizer.step = lambda: seen.extend(p.grad.clone() for p in ln.params)
    ln.update(batch, 0)
    return model, seen


def test_every_optimizer_name_is_built():
    assert set(OPTIMIZERS) == set(OptimizerName)


def test_sgd_moves_each_weight_in_proportion_to_its_gradient(grads, batch):
    model, g = grads
    assert sum(float(x.abs().sum()) for x in g) > 0
    for d, gi in zip(step(make(copy.deepcopy(model), optimizer="sgd", lr=0.25), batch), g):
        torch.testing.assert_close(d, -0.25 * gi, atol=1e-7, rtol=1e-4)


@pytest.mark.parametrize("eps", [1e-8, 1e-3])
def test_adamw_first_step_is_lr_g_over_abs_g_plus_eps(grads, batch, eps):
    model, g = grads
    lr = 1e-3
    deltas = step(make(copy.deepcopy(model), optimizer="adamw", lr=lr, adam_eps=eps), batch)
    for d, gi in zip(deltas, g):
        torch.testing.assert_close(d, -lr * gi / (gi.abs() + eps), atol=2e-7, rtol=1e-3)
    # at the default eps every weight with a gradient moves by about lr, however small its gradient
    if eps == 1e-8:
        moved = torch.cat([d.flatten() for d, gi in zip(deltas, g)])[torch.cat([gi.flatten() for gi in g]).abs() > 1e-6]
        assert moved.numel() > 0 and torch.allclose(moved.abs(), torch.full_like(moved, lr), rtol=1e-2)


def test_bad_optimizer_settings_name_the_key():
    with pytest.raises(ConfigError, match="train.optimizer='adam'.*adamw, sgd"):
        TrainConfig(optimizer="adam")
    with pytest.raises(ConfigError, match=r"train.momentum=1.0 must be in \[0, 1\)"):
        TrainConfig(momentum=1.0)
    with pytest.raises(ConfigError, match="train.adam_eps=0"):
        TrainConfig(adam_eps=0)


def test_a_resumed_learner_trains_with_its_own_settings_and_the_saved_moments(tiny_model_dir, batch):
    """A checkpoint's optimizer state brings AdamW's moments and step count; the lr, weight decay and eps are the
    resumed run's config (torch's `load_state_dict` alone put back the saved ones, and the run trained on with
    the old learning rate while its config said otherwise)."""
    model = load_model(tiny_model_dir)
    first = make(copy.deepcopy(model), optimizer="adamw", lr=1e-3)
    step(first, batch)
    saved = copy.deepcopy(first.state_dict())
    resumed = make(copy.deepcopy(first.model), optimizer="adamw", lr=5e-3, weight_decay=0.1, adam_eps=1e-4)
    resumed.load_state_dict(saved)
    (group,) = resumed.optimizer.param_groups
    assert (group["lr"], group["weight_decay"], group["eps"]) == (5e-3, 0.1, 1e-4)
    for p_new, p_old in zip(resumed.params, first.params):
        s_new, s_old = resumed.optimizer.state[p_new], first.optimizer.state[p_old]
        assert float(s_new["step"]) == 1.0
        torch.testing.assert_close(s_new["exp_avg"], s_old["exp_avg"], rtol=0, atol=0)
    # the second step equals the first learner's, continued with the new settings set by hand
    for g in first.optimizer.param_groups:
        g.update(lr=5e-3, weight_decay=0.1, eps=1e-4)
    for d_new, d_old in zip(step(resumed, batch), step(first, batch)):
        torch.testing.assert_close(d_new, d_old, rtol=0, atol=0)
    assert resumed.update(batch, 0)["actor/lr"] == 5e-3
