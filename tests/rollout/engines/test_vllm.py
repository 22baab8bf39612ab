"""The vLLM engine adapter, against a stand-in `vllm` module (tests/rollout/engines/fake_vllm.py).

vLLM itself needs a GPU and is not installed in CI, so these tests check our side of the contract:
what we pass to `vllm.LLM` / `SamplingParams` / `generate`, how outputs map to `GenerationOutput`,
weight sync + prefix-cache reset, sleep mode, the install hint, config validation and the registry.
The real engine is exercised by benchmarks/gpu_check.sh on a GPU machine.
"""

import sys

import pytest
import torch

from tests.rollout.engines import fake_vllm
from tests.rollout.engines.fake_vllm import CompletionOutput, FakeLLM, Logprob
from ulorl.config import ConfigError, VLLMConfig, load_run_config
from ulorl.rollout.engines.base import SamplingParams
from ulorl.rollout.engines.registry import build_engine
from ulorl.rollout.engines.vllm import VLLMEngine, build_vllm_engine, request_seed, vllm_param_name

EOS = 4  # <|im_end|> in the built-in tokenizer


@pytest.fixture
def fake(monkeypatch):
    return fake_vllm.install(monkeypatch)


def scripted(script):
    """A responder returning `script[i]` = (tokens, finish_reason, stop_reason) with log-prob -0.1 * (pos + 1)."""
    def respond(ids, sp, i):
        toks, finish, stop = script[i]
        # each position also lists another token (a top-k entry), which must not be picked up
        lps = [{t: Logprob(-0.1 * (j + 1), 1), 999: Logprob(-9.0, 2)} for j, t in enumerate(toks)]
        return CompletionOutput(0, list(toks), lps, finish, stop)
    return respond


def test_missing_vllm_names_the_install_command(monkeypatch, tiny_model_dir):
    monkeypatch.setitem(sys.modules, "vllm", None)  # `import vllm` raises ImportError
    with pytest.raises(ImportError, match=r"pip install 'ulorl\[vllm\]'"):
        build_engine("vllm", None, None, [EOS], model_path=str(tiny_model_dir))
    with pytest.raises(ImportError, match=r"pip install 'ulorl\[vllm\]'"):
        VLLMEngine(tiny_model_dir, [EOS])


def test_too_old_vllm_is_reported(fake, monkeypatch, tiny_model_dir):
    monkeypatch.setattr(FakeLLM, "reject_logprobs_mode", True)
    with pytest.raises(ImportError, match=r"too old: ulorl needs >= 0\.19\.1"):
        VLLMEngine(tiny_model_dir, [EOS])


def test_llm_gets_the_options(fake, tiny_model_dir):
    import os

    opts = VLLMConfig(gpu_memory_utilization=0.3, max_model_len=2048, dtype="bfloat16", enforce_eager=True,
                      max_num_seqs=64)
    eng = build_vllm_engine([EOS, 2], model_path=str(tiny_model_dir), options=opts, seed=7)
    kw = FakeLLM.instances[-1].kwargs
    assert kw["model"] == str(tiny_model_dir) and kw["skip_tokenizer_init"] is True
    assert kw["enable_prefix_caching"] is True and kw["logprobs_mode"] == "processed_logprobs"
    assert (kw["gpu_memory_utilization"], kw["max_model_len"], kw["dtype"], kw["seed"]) == (0.3, 2048, "bfloat16", 7)
    assert kw["tensor_parallel_size"] == 1 and kw["enforce_eager"] is True and kw["max_num_seqs"] == 64
    assert "hf_overrides" not in kw and eng.eos_ids == [2, EOS]
    assert os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"  # engine core in-process: weight sync is a copy


def test_generate_maps_prefixes_params_and_outputs(fake, monkeypatch, tiny_model_dir):
    monkeypatch.setattr(FakeLLM, "responder", scripted([
        ([7, 8, EOS], "stop", EOS),  # EOS via stop_token_ids: stop_reason is the token id
        ([9, 9, 9, 9], "length", None),  # segment cap
        ([5, EOS], "stop", None),  # EOS via the tokenizer's eos id: stop_reason None
    ]))
    eng = VLLMEngine(tiny_model_dir, [EOS])
    prefixes = [[1, 2, 3], [4, 5], [6]]
    outs = eng.generate(prefixes, 4, SamplingParams(temperature=0.85, top_p=1.0, top_k=-1), seed=11)
    prompts, sps = FakeLLM.instances[-1].generate_calls[-1]
    assert prompts == [{"prompt_token_ids": p} for p in prefixes]  # token ids in, in order
    assert [sp.seed for sp in sps] == [request_seed(11, i) for i in range(3)] and len({sp.seed for sp in sps}) == 3
    for sp in sps:
        assert sp.kw == {"n": 1, "temperature": 0.85, "top_p": 1.0, "top_k": -1, "max_tokens": 4, "logprobs": 0,
                         "stop_token_ids": [EOS], "detokenize": False, "seed": sp.seed}
    assert [o.tokens for o in outs] == [[7, 8, EOS], [9, 9, 9, 9], [5, EOS]]
    assert outs[0].logprobs == pytest.approx([-0.1, -0.2, -0.3])  # the sampled token's entry, not the top-k one
    assert [o.eos for o in outs] == [True, False, True]
    assert [o.prefill_tokens for o in outs] == [3, 2, 1]
    st = eng.stats
    # 9 new tokens; the longest request took 4 decode steps, x 3 rows = 12 slots; 6 prompt tokens
    assert (st.useful_tokens, st.decode_iterations, st.decode_slots, st.prefill_tokens) == (9, 4, 12, 6)
    assert st.extra["generate_calls"] == 1 and st.extra["cached_prompt_tokens"] == 1 + 1 + 0  # fake: len // 2


def test_seeds_greedy_and_unseeded(fake, monkeypatch, tiny_model_dir):
    monkeypatch.setattr(FakeLLM, "responder", scripted([([EOS], "stop", EOS)] * 2))
    eng = VLLMEngine(tiny_model_dir, [EOS])
    eng.generate([[1], [1]], 2, SamplingParams(greedy=True, top_k=20, top_p=0.95))
    _, sp = FakeLLM.instances[-1].generate_calls[-1]
    assert not isinstance(sp, list) and sp.seed is None  # no call seed: one shared SamplingParams
    assert (sp.temperature, sp.top_k, sp.top_p) == (0.0, 20, 0.95)
    eng.seeded = False
    eng.generate([[1], [1]], 2, SamplingParams(), seed=3)
    _, sp = FakeLLM.instances[-1].generate_calls[-1]
    assert not isinstance(sp, list) and sp.seed is None


@pytest.mark.parametrize("comp, message", [
    (([7], "stop", "</s>"), "without an EOS token"),  # a stop string: never asked for
    (([7], "abort", None), "finish_reason='abort'"),
    (([7, 8], None, None), "finish_reason=None"),
])
def test_unexpected_finish_is_an_error(fake, monkeypatch, tiny_model_dir, comp, message):
    monkeypatch.setattr(FakeLLM, "responder", scripted([comp]))
    eng = VLLMEngine(tiny_model_dir, [EOS])
    with pytest.raises(RuntimeError, match=message):
        eng.generate([[1, 2]], 4, SamplingParams())


def test_missing_logprobs_and_reordered_outputs_are_errors(fake, monkeypatch, tiny_model_dir):
    monkeypatch.setattr(FakeLLM, "responder", lambda ids, sp, i: CompletionOutput(0, [7], None, "length"))
    eng = VLLMEngine(tiny_model_dir, [EOS])
    with pytest.raises(RuntimeError, match="no log-probs"):
        eng.generate([[1]], 1, SamplingParams())
    monkeypatch.setattr(FakeLLM, "responder", scripted([([7], "length", None)] * 2))
    monkeypatch.setattr(FakeLLM, "shuffle_outputs", True)
    with pytest.raises(RuntimeError, match="out of order"):
        eng.generate([[1, 2], [3]], 1, SamplingParams())


def test_context_overflow_names_the_setting(fake, tiny_model_dir):
    eng = VLLMEngine(tiny_model_dir, [EOS], max_model_len=10)
    with pytest.raises(ValueError, match=r"max_model_len=10\); raise rollout.vllm.max_model_len"):
        eng.generate([[1] * 8], 4, SamplingParams())


def test_real_tiny_model_samples_and_weight_sync(fake, tiny_model_dir):
    """HF-backed fake: sampled log-probs match a recomputation; sync loads every parameter, then resets the cache."""
    from transformers import AutoModelForCausalLM

    eng = VLLMEngine(tiny_model_dir, [EOS])
    llm = FakeLLM.instances[-1]
    outs = eng.generate([[3, 5, 6], [3, 5]], 6, SamplingParams(temperature=0.85), seed=0)
    learner = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    o = outs[0]
    with torch.no_grad():
        logits = learner(torch.tensor([[3, 5, 6] + o.tokens])).logits[0, 2:-1] / 0.85
    ref = torch.log_softmax(logits, -1).gather(-1, torch.tensor(o.tokens)[:, None]).squeeze(-1)
    assert o.logprobs == pytest.approx(ref.tolist(), abs=1e-5)

    with torch.no_grad():
        for p in learner.parameters():
            p.add_(0.01)
    state = learner.state_dict()
    eng.sync_weights(state)
    assert llm.model.loaded == list(state)  # every tensor, under its HF name
    assert llm.events[-2:] == [("load_weights", len(state)), ("reset_prefix_cache",)]  # cache reset after the load
    for k, v in llm.model.hf.state_dict().items():
        assert torch.equal(v, state[k]), k
    assert eng.stats.extra["weight_syncs"] == 1
    assert vllm_param_name("_orig_mod.model.layers.0.mlp.up_proj.weight") == "model.layers.0.mlp.up_proj.weight"


def test_sleep_mode_frees_memory_between_generations(fake, monkeypatch, tiny_model_dir):
    monkeypatch.setattr(FakeLLM, "responder", scripted([([EOS], "stop", EOS)]))
    eng = VLLMEngine(tiny_model_dir, [EOS], enable_sleep_mode=True)
    llm = FakeLLM.instances[-1]
    assert llm.kwargs["enable_sleep_mode"] is True
    eng.generate([[1]], 2, SamplingParams())
    eng.sync_weights({})
    eng.generate([[1]], 2, SamplingParams())
    assert llm.events == [("generate", 1), ("sleep", 1),  # level 1: weights kept in CPU memory
                          ("wake_up", ("weights",)), ("load_weights", 0), ("reset_prefix_cache",),
                          ("wake_up", ("kv_cache",)), ("generate", 1), ("sleep", 1)]


def test_registry_builds_it_with_yarn(fake, tiny_model_dir):
    cfg = load_run_config(None, ["rollout.engine=vllm", "model.rope_scaling_factor=1.5",
                                 "model.rope_original_max_len=2048", "rollout.vllm.gpu_memory_utilization=0.4"])
    eng = build_engine(cfg.rollout.engine, None, None, [EOS], model_path=str(tiny_model_dir),
                       vllm=cfg.rollout.vllm, model_cfg=cfg.model, seed=3)
    assert isinstance(eng, VLLMEngine)
    kw = FakeLLM.instances[-1].kwargs
    rope = kw["hf_overrides"]["rope_scaling"]
    assert (rope["rope_type"], rope["factor"], rope["original_max_position_embeddings"]) == ("yarn", 1.5, 2048)
    assert kw["hf_overrides"]["rope_parameters"] == rope
    assert kw["max_model_len"] == 3072 and kw["gpu_memory_utilization"] == 0.4 and kw["seed"] == 3  # 2048 x 1.5


def test_training_steps_through_the_vllm_engine(fake, tmp_path, fake_reward):
    """`rollout.engine=vllm` end to end: the session builds the engine from the policy folder and syncs it."""
    from ulorl.run.session import open_session
    from ulorl.run.loop import train_step

    cfg = load_run_config(None, ["rollout.engine=vllm", "model.warm_start=none", "data.eval=null",
                                 "data.train_size=40", "logging.progress=false", "logging.loggers=[jsonl]",
                                 "rollout.max_response_len=8", "rollout.num_segments=2", "rollout.group_size=2",
                                 "rollout.decode_batch=4", "train.train_groups=1", "algo.dynamic_sampling=false",
                                 "train.lr=1e-3"])
    s = open_session(cfg, tmp_path / "run")
    s.reward.close()
    s.reward = fake_reward
    try:
        from ulorl.models import resolve_model_path

        assert isinstance(s.engine, VLLMEngine)
        assert FakeLLM.instances[-1].kwargs["model"] == str(resolve_model_path(cfg.model.path))  # builtin: its folder
        decoded = sum(train_step(s)["rollout/decoded_tokens"] for _ in range(3))
        assert decoded == s.engine.stats.useful_tokens > 0 and s.engine.stats.extra["weight_syncs"] == 3
        served = FakeLLM.instances[-1].model.hf.state_dict()
        for k, v in s.model.state_dict().items():
            assert torch.equal(served[k], v), k  # the engine serves the learner's current weights
    finally:
        s.close()


@pytest.mark.parametrize("override, message", [
    ("rollout.vllm.gpu_memory_utilization=1.5", "rollout.vllm.gpu_memory_utilization=1.5 must be in (0, 1]"),
    ("rollout.vllm.tensor_parallel_size=0", "rollout.vllm.tensor_parallel_size=0 must be > 0"),
    ("rollout.vllm.dtype=int8", "rollout.vllm.dtype='int8' is not allowed"),
    ("rollout.vllm.max_model_len=0", "rollout.vllm.max_model_len=0 must be > 0"),
    ("rollout.vllm.swap=4", "unknown config key rollout.vllm.swap"),
])
def test_vllm_config_validation(override, message):
    with pytest.raises(ConfigError) as e:
        load_run_config(None, [override])
    assert message in str(e.value)
    ok = load_run_config(None, ["rollout.vllm.enable_sleep_mode=true", "rollout.vllm.max_model_len=null"])
    assert ok.rollout.vllm.enable_sleep_mode is True and ok.rollout.vllm.max_model_len is None


def test_qwen3_4b_preset_has_the_paper_settings():
    from pathlib import Path

    cfg = load_run_config(Path(__file__).resolve().parents[3] / "configs" / "qwen3_4b.yaml")
    r, v = cfg.rollout, cfg.rollout.vllm
    assert (r.engine, r.max_response_len, r.num_segments, r.segment_len, r.group_size) == ("vllm", 131072, 8, 16384, 8)
    assert (r.temperature, r.top_p, r.top_k, r.decode_batch, cfg.train.train_groups) == (0.85, 1.0, -1, 1024, 128)
    assert v.max_model_len >= cfg.data.max_prompt_len + r.max_response_len and v.enable_sleep_mode
    assert (cfg.algo.is_mode, cfg.algo.tau, cfg.algo.sigma, cfg.train.lr) == ("pois", 0.99, 0.2, 1e-6)
    assert cfg.model.gradient_checkpointing and cfg.train.micro_batch_tokens >= v.max_model_len
