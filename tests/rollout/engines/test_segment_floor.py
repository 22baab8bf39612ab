"""What `benchmarks/gpu_paged_check.py`'s `segment_rollout` counts for its bandwidth floor: the decode iterations and
the K/V positions the decode attention reads, worked out from the rollout's segments, equal what the engine's
scheduler actually ran, step by step (loop against closed form). On a GPU the floor says how far each M's rollout is
from reading the weights once per iteration and each context once per token (docs/scale.md)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.rollout.engines.benchmark_modules import benchmark_module
from ulorl.plan.simulate import context_reads
from ulorl.rollout.engines.torch.scheduler import Scheduler


def test_the_floor_prices_the_shape_by_hand():
    """`segment_floor.py`'s bytes of the Qwen2.5-0.5B shape: embedding 151,936 x 896 (tied: once); per layer q
    896 x 896 + 896, k and v 896 x 128 + 128 each, o 896 x 896, the MLP 3 x 896 x 4,864, two norms of 896; a final
    norm. K/V a token: 24 layers x 2 KV heads x 64 x 2 (K, V) x 2 bytes."""
    from transformers import AutoConfig, AutoModelForCausalLM

    floor = benchmark_module("segment_floor")
    b = floor.shape_bytes()
    layer = 896 * 896 + 896 + 2 * (896 * 128 + 128) + 896 * 896 + 3 * 896 * 4864 + 2 * 896
    assert b["params"] == 151936 * 896 + 24 * layer + 896 == 494_032_768
    kw = dict(floor.SHAPES["qwen2.5-0.5b"])  # the model the GPU check builds, here without memory
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model(kw.pop("model_type"), tie_word_embeddings=True,
                                                                      **kw))
        model.tie_weights()  # transformers 5.0 does not tie a model built on the meta device; later versions do
    assert sum(t.numel() for t in model.parameters()) == b["params"]
    assert b["weight_bytes"] == 2 * b["params"] and b["kv_bytes_per_token"] == 24 * 2 * 64 * 2 * 2 == 12288
    c = floor.cost_models(b, 4e12)
    assert c["floor"].decode_fixed == b["weight_bytes"] / 4e12 and c["floor"].decode_ctx == 12288 / 4e12
    fixed, row = floor.host_costs()  # through the measured 64- and 256-row steps
    assert c["2x floor+host"].decode_fixed == pytest.approx(2 * b["weight_bytes"] / 4e12 + fixed) and row > 0


def test_context_reads_by_hand():
    # a row after 64 tokens decoding 3: reads 64, 65, 66; one after 67 decoding 2: 67, 68; nothing decoded: 0
    assert context_reads(np.array([64, 67, 90]), np.array([3, 2, 0])) == 64 + 65 + 66 + 67 + 68


@pytest.mark.parametrize("m", [1, 4])
def test_the_floor_counts_are_the_steps_the_engine_ran(m, monkeypatch):
    check = benchmark_module("gpu_paged_check")
    steps: list[int] = []  # K/V positions read by each decode step: every running row's context after its token
    rows: list[int] = []  # the rows each decode step ran
    run_step = Scheduler._decode

    def counted(self):
        logits = run_step(self)
        steps.append(sum(s.cached for s in self.running))
        rows.append(len(self.running))
        return logits

    monkeypatch.setattr(Scheduler, "_decode", counted)
    model = check.build_model(check.QUICK["qwen2.5-0.5b"], torch.device("cpu"), torch.float32)
    r = check.segment_rollout(model, torch.device("cpu"), m, 256, 2, 16, {"attention": "auto", "block_size": None,
                                                                          "options": {}})
    assert (r["decode_attention"], r["block_size"]) == ("split_k", 32)  # auto, as the CPU resolves it
    assert r["preemptions"] == 0 and r["samples"] >= 16 and r["rounds"] >= (1 if m == 1 else 2)
    assert r["decode_iterations"] == len(steps) > 0
    assert r["context_tokens"] == sum(steps)
    assert r["row_iterations"] == sum(rows)  # the planner's `row_iters`, which `gpu_report.py` prices
