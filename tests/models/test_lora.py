"""LoRA through peft (`model.lora.*`, ulorl/models/lora.py) on the built-in tiny model.

References come from other paths: the learner's forward for the engine's log-probs, the merged plain model
(peft's own merge) for what the adapted engine decodes, the base model for what adapters change.
Skipped when peft is not installed.
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("peft")

from ulorl.config import AlgoConfig, LoraConfig, ModelConfig, TrainConfig  # noqa: E402
from ulorl.config.loader import ConfigError  # noqa: E402
from ulorl.learners.local import LocalLearner, make_micro_batches  # noqa: E402
from ulorl.models import load_model, load_tokenizer  # noqa: E402
from ulorl.models.lora import (LoraError, adapter_state_dict, is_lora, load_policy_model, merged_model,  # noqa: E402
                               save_policy)
from ulorl.rollout.engines import SamplingParams, TorchEngine  # noqa: E402
from ulorl.trajectory import Trajectory  # noqa: E402

T = 0.7
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def lora_model(model_dir, rank=4, targets=TARGETS, scale=0.2):
    """The tiny model with adapters whose B is drawn (seeded) instead of peft's zeros, so they change outputs."""
    model = load_policy_model(ModelConfig(lora=LoraConfig(rank=rank, alpha=8, target_modules=targets)),
                              str(model_dir))
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * scale)
    return model


def prefixes(n):
    return [[5 + (i * 7 + j) % 40 for j in range(3 + (i * 5) % 13)] for i in range(n)]


def test_adapters_start_at_zero_and_only_they_train(tiny_model_dir):
    base = load_model(str(tiny_model_dir))
    model = load_policy_model(ModelConfig(lora=LoraConfig(rank=4, alpha=8)), str(tiny_model_dir))
    ids = torch.tensor([prefixes(3)[2]])
    with torch.no_grad():  # peft's B = 0: the adapted model is the base model at the start
        assert torch.equal(model(ids).logits, base(ids).logits)
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    # tiny model: 3 layers x 7 projections x (lora_A, lora_B)
    assert len(trainable) == 42 and all(".lora_A." in n or ".lora_B." in n for n in trainable)
    learner = LocalLearner(model, TrainConfig(), AlgoConfig(), T, 0)
    in_optimizer = {id(p) for g in learner.optimizer.param_groups for p in g["params"]}
    assert in_optimizer == {id(p) for p in model.parameters() if p.requires_grad}


def test_engine_decodes_with_adapters_applied(tiny_model_dir):
    model = lora_model(tiny_model_dir)
    greedy = SamplingParams(greedy=True)
    eos = list(range(400, 450))
    ours = TorchEngine(model, eos, max_batch=4).generate(prefixes(6), 16, greedy)
    reference = merged_model(lora_model(tiny_model_dir))  # peft's merge: W + B A alpha / r, plain nn.Linear
    assert not is_lora(reference)
    merged = TorchEngine(reference, eos, max_batch=4).generate(prefixes(6), 16, greedy)
    assert [o.tokens for o in ours] == [o.tokens for o in merged]
    for a, b in zip(ours, merged):
        assert torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-5, rtol=0)
    base = TorchEngine(load_model(str(tiny_model_dir)), eos, max_batch=4).generate(prefixes(6), 16, greedy)
    assert [o.tokens for o in base] != [o.tokens for o in ours]  # the adapters changed what is decoded


def test_engine_logprobs_equal_the_learner_with_adapters(tiny_model_dir):
    tok = load_tokenizer(str(tiny_model_dir))
    model = lora_model(tiny_model_dir)
    eng = TorchEngine(model, [tok.eos_token_id], max_batch=3)
    params = SamplingParams(temperature=T, top_k=20, top_p=0.9)
    learner = LocalLearner(model, TrainConfig(), AlgoConfig(), T, tok.pad_token_id)
    checked = 0
    for i, (p, o) in enumerate(zip(prefixes(5), eng.generate(prefixes(5), 12, params, seed=3))):
        traj = Trajectory(sample_id=f"s/{i}", group_id="s", prompt_id="p", prompt_tokens=p, ground_truth="0",
                          data_source="x")
        traj.append_segment(o.tokens, o.logprobs, 0)
        (mb,) = make_micro_batches([traj], torch.zeros(1), 1, tok.pad_token_id, 10_000)
        with torch.no_grad():
            lp, _ = learner.forward(mb)
        assert torch.allclose(lp[mb.response_mask], torch.tensor(o.logprobs), atol=1e-5, rtol=0)
        checked += len(o.tokens)
    assert checked >= 5 * 10


def test_saved_adapters_reload_to_the_same_outputs(tiny_model_dir, tmp_path):
    model = lora_model(tiny_model_dir, targets=["q_proj", "down_proj"])
    save_policy(model, tmp_path / "policy")
    again = load_policy_model(ModelConfig(), str(tmp_path / "policy"))  # the folder says rank and targets
    assert is_lora(again)
    a, b = adapter_state_dict(model), adapter_state_dict(again)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    ids = torch.tensor([prefixes(4)[3]])
    with torch.no_grad():
        assert torch.equal(model(ids).logits, again(ids).logits)


def test_unknown_target_module_names_the_key_and_the_layers(tiny_model_dir):
    with pytest.raises(LoraError, match=r"model.lora.target_modules names \['c_attn'\].*q_proj"):
        load_policy_model(ModelConfig(lora=LoraConfig(rank=2, target_modules=["c_attn"])), str(tiny_model_dir))


@pytest.mark.parametrize("field, value, message", [("rank", -1, "model.lora.rank=-1 must be >= 0"),
                                                   ("dropout", 1.0, r"model.lora.dropout=1.0 must be in \[0, 1\)"),
                                                   ("target_modules", [], "model.lora.target_modules")])
def test_bad_lora_settings_name_the_key(field, value, message):
    with pytest.raises(ConfigError, match=message):
        LoraConfig(**{"rank": 4, field: value})


@pytest.mark.parametrize("override", ["rollout.engine=vllm", "train.pipeline=overlap", "distributed.backend=ray"])
def test_lora_refuses_the_setups_not_wired_for_it(override):
    from ulorl.config import load_run_config

    with pytest.raises(ConfigError, match="model.lora.rank=4: LoRA runs with rollout.engine=torch or hf"):
        load_run_config(None, ["model.lora.rank=4", override])
