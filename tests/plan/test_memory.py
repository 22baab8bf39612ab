"""`ulorl.plan.memory`: the count on hand-computed values, parameter counts against models built in code."""

import json

import pytest
from transformers import Qwen2Config, Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM

from ulorl.plan.memory import (KNOWN_SHAPES, LearnerSetup, ModelShape, fit_table, kv_cache_bytes, layer_terms,
                               learner_memory, load_shape)

TINY = dict(num_hidden_layers=2, hidden_size=4, num_attention_heads=2, num_key_value_heads=1, head_dim=2,
            intermediate_size=8, vocab_size=10, tie_word_embeddings=True)


@pytest.mark.parametrize("cls_cfg,cls_model,model_type", [(Qwen3Config, Qwen3ForCausalLM, "qwen3"),
                                                          (Qwen2Config, Qwen2ForCausalLM, "qwen2")])
def test_parameter_count_matches_a_model_built_in_code(cls_cfg, cls_model, model_type):
    model = cls_model(cls_cfg(**TINY))
    assert ModelShape.from_config({**TINY, "model_type": model_type}).params == sum(p.numel() for p in
                                                                                     model.parameters())


def test_known_shapes_have_the_published_sizes():
    assert load_shape("qwen3-4b").params / 1e9 == pytest.approx(4.02, abs=0.01)  # Qwen3-4B: 4.0B
    assert load_shape("qwen3-30b-a3b").params / 1e9 == pytest.approx(30.5, abs=0.1)  # Qwen3-30B-A3B: 30.5B
    assert load_shape("qwen2.5-0.5b").params / 1e9 == pytest.approx(0.494, abs=0.001)  # Qwen2.5-0.5B: 0.49B


def test_learner_memory_by_hand():
    m = ModelShape.from_config({**TINY, "model_type": "qwen2"})  # no QK-norm: q 4 and kv 2 values per token
    # kept per token and layer: residual 6 x 4 = 24, attention 3 q + k + v = 16, MLP 4 x 8 = 32, lse 2 heads
    assert layer_terms(m) == {"residual": 24, "attention": 16, "lse": 2, "mlp": 32}
    mem = learner_memory(m, LearnerSetup(tokens=10))
    # per layer (24 + 16 + 32 + 2) x 4 B x 10 tokens = 2960; kept 2 layers + final norm 2 x 4 x 4 x 10 = 6240
    assert mem["kept"] == 2 * 2960 + 320
    # backward working set (2 x 4 + 8) x 4 x 10 = 640; head: gathered hidden and its gradient 2 x 4 x 4 x 10
    # + two 10 x 10 float32 logit buffers = 320 + 800
    assert mem["layer"] == 640 and mem["head"] == 1120
    # params 2 x (attention 48 + biases 8 + MLP 96 + norms 8) + embedding 40 + final norm 4 = 364: gradients 1456
    assert m.params == 364 and mem["grads"] == 1456
    # top layer: kept + max(layer, head) + head gradient 160 = 7520; bottom: 2960 + 640 + 1456 = 5056
    assert mem["update_increment"] == 6240 + 1120 + 160 and mem["peak_at"] == "top layer"
    assert mem["static"] == 364 * 4 * 3  # weights + two AdamW moments
    ck = learner_memory(m, LearnerSetup(tokens=10, checkpointing=True))
    # checkpointing keeps 2 layer inputs (4 values) + the final norm: 2 x 160 + 320; the layer recomputed whole
    assert ck["kept"] == 640 and ck["layer"] == 2960 + 640
    # top layer 640 + 3600 + 160 = 4400; bottom layer: one input 160 + 3600 + every gradient 1456 = 5216
    assert ck["update_increment"] == 5216 and ck["peak_at"] == "bottom layer"
    sp = learner_memory(m, LearnerSetup(tokens=20, checkpointing=True, sequence_parallel=2))
    assert sp["kept"] == ck["kept"] and sp["layer"] == ck["layer"]  # 20 tokens over 2 ranks: 10 each
    off = learner_memory(m, LearnerSetup(tokens=10, checkpointing=True, offload=True))
    # the kept layer inputs go to the CPU: top 4400 - 640 = 3760 on the device; the bottom (5216) stays the peak
    assert off["offloaded"] == 640 and off["total_device"] == off["static"] + 5216


def test_later_micro_batches_padding_and_the_all_reduce_by_hand():
    m = ModelShape.from_config({**TINY, "model_type": "qwen2"})  # the values of test_learner_memory_by_hand
    held = learner_memory(m, LearnerSetup(tokens=10, grads_held=True))
    # a later micro-batch: the top layer's moment holds every gradient (1456), not the head's (160)
    assert held["update_increment"] == 6240 + 1120 + 1456
    padded = learner_memory(m, LearnerSetup(tokens=10, padded_rows=2))
    # 2 rows of 5: the boolean mask 2 x 5 x 5 = 50 bytes kept; K and V repeated from 1 to 2 heads,
    # 2 x (4 - 2) x 4 B x 10 = 160 more per layer and 160 more in backward's working set
    assert padded["kept"] == 2 * (2960 + 160) + 320 + 50 and padded["layer"] == 640 + 160
    assert padded["update_increment"] == 6610 + 1120 + 160  # the head (1120) still beats the working set (800)
    sp = learner_memory(m, LearnerSetup(tokens=2, checkpointing=True, sequence_parallel=2, replicated=True))
    # one token per rank: top 64 + 360 + 160 = 584, bottom 16 + 360 + 1456 = 1832; summing the gradients
    # through a flat copy holds them twice: 2 x 1456
    assert sp["update_increment"] == 2912 and sp["peak_at"] == "gradient all-reduce"
    assert sp["total_device"] == sp["static"] + 2912


def test_memory_per_token_is_flat_with_checkpointing():
    m = load_shape("qwen3-4b")
    per_tok = [learner_memory(m, LearnerSetup(tokens=L, checkpointing=True, autocast=True))["kept"] / L
               for L in (32768, 131072)]
    assert per_tok[0] == pytest.approx(per_tok[1], rel=1e-3)


def test_kv_cache_by_hand():
    # Qwen3-4B: 2 (K, V) x 36 layers x 8 KV heads x 128 x 2 bytes = 147,456 bytes per token
    assert kv_cache_bytes(load_shape("qwen3-4b"), 1) == 147456


def test_fit_table_and_cli(capsys):
    rows = fit_table(load_shape("qwen3-4b"), [32768], 141.0)
    assert rows[0]["gpus"] == 1 and rows[0]["device_gib"] <= 141
    moe = fit_table(load_shape("qwen3-30b-a3b"), [32768], 141.0)[0]
    assert moe["gpus"] > 1  # 30.5B float32 weights + AdamW alone are 341 GiB
    from ulorl.cli import main

    assert main(["plan", "--memory", "--model", "qwen2.5-0.5b", "--lengths-k", "32", "--checkpointing",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["rows"][0]["length"] == 32768 and out["rows"][0]["total_device"] > 0
    assert main(["plan", "--memory", "--model", "qwen2.5-0.5b", "--lengths-k", "32", "--checkpointing",
                 "--single-micro-batch", "--json"]) == 0
    single = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["rows"][0]
    # one micro-batch holds only the head's gradient at the top layer; an RL update's later ones hold them all
    assert single["update_increment"] < out["rows"][0]["update_increment"]
    assert main(["plan", "--memory", "--model", "qwen2.5-0.5b", "--sp", "4"]) == 2  # 14 heads, 2 KV heads
    assert "--sp 4 must divide the 14 heads and 2 KV heads" in capsys.readouterr().err


@pytest.mark.parametrize("flags, message", [
    (["--lengths-k", "inf"], "--lengths-k 'inf': 'inf' is not a length of at least one token, in thousands"),
    (["--lengths-k", "32,abc"], "--lengths-k '32,abc': 'abc' is not a length"),
    (["--lengths-k", "0.0001"], "'0.0001' is not a length of at least one token"),
    (["--lengths-k", ","], "--lengths-k ',': give one or more lengths"),
    (["--gpu-gib", "nan"], "--gpu-gib nan: must be a positive number"),
    (["--gpu-gib", "-5"], "--gpu-gib -5.0: must be a positive number"),
    (["--kv-bytes", "0"], "--kv-bytes 0: must be a positive number"),
    (["--kv-seqs", "-1"], "--kv-seqs -1: must be 0 or more"),
])
def test_memory_flags_out_of_range_are_one_line(flags, message, capsys):
    # 'inf' was an OverflowError's traceback, 'nan' "cannot convert float NaN to integer", and a GPU of nan or -5
    # GiB a table of "not within 64 GPUs"
    from ulorl.cli import main

    assert main(["plan", "--memory", "--model", "qwen2.5-0.5b", *flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ulorl plan: error: ") and message in err and len(err.splitlines()) == 1, err


def test_lengths_k_keeps_an_empty_item_out():
    from ulorl.plan.memory_cli import parse_lengths_k

    assert parse_lengths_k("32, 64,") == [32768, 65536] and parse_lengths_k("0.5") == [512]
    assert set(KNOWN_SHAPES) == {"qwen3-4b", "qwen3-30b-a3b", "qwen2.5-0.5b"}


def test_a_model_config_the_planner_cannot_size_is_one_line(tmp_path, capsys):
    """A `config.json` without the decoder's sizes, or not JSON, was a TypeError / JSONDecodeError traceback; a
    multimodal config is sized by its `text_config`; the built-in model's count is readable (it printed 0.00B)."""
    from ulorl.cli import main

    def plan(argv):
        return main(["plan", *argv])

    cases = {"empty": "{}", "notjson": "nope", "list": "[1]"}
    for name, text in cases.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(text)
    shape = {"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "vocab_size": 100,
             "intermediate_size": 128}
    (tmp_path / "vl").mkdir()
    (tmp_path / "vl" / "config.json").write_text(json.dumps({"model_type": "qwen2_5_vl", "text_config": shape}))
    for name, message in (("empty", "lacks num_hidden_layers, hidden_size, num_attention_heads, vocab_size"),
                          ("notjson", "config.json is not JSON (Expecting value"), ("list", "holds list, not a model")):
        assert plan(["--memory", "--model", str(tmp_path / name)]) == 2
        assert message in capsys.readouterr().err
    assert plan(["--memory", "--model", str(tmp_path / "vl")]) == 0
    assert load_shape(str(tmp_path / "vl")) == ModelShape.from_config({"model_type": "qwen2_5_vl", **shape})
    assert plan(["--memory", "--model", "builtin"]) == 0
    assert "model builtin: 795.71K parameters" in capsys.readouterr().out
