"""The built-in task, tokenizer and tiny model; the saved folder loads with Auto* classes."""

import numpy as np
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from ulorl.models import build_tokenizer
from ulorl.tasks.chain import ChainProblem, generate_problems, make_rows, score_chain


def test_task_is_deterministic_and_split_seeds_differ():
    assert make_rows(50, seed=3) == make_rows(50, seed=3)
    assert make_rows(50, seed=3) != make_rows(50, seed=4)


def test_worked_solution_by_hand():
    # start 2, steps 4: x1 = 2+4 = 6, x2 = 6+3 = 9, x3 = 9+2 = 11 -> 1, x4 = 1+1 = 2
    p = ChainProblem(start=2, steps=4)
    assert p.values() == [6, 9, 1, 2] and p.answer == 2
    assert p.prompt_text == "chain start 2 steps 4"
    assert p.solution_text() == "4 6 3 9 2 1 1 2 answer 2"


def test_answers_are_correct_for_every_generated_problem():
    for p in generate_problems(300, seed=0):
        x = p.start
        for c in range(p.steps, 0, -1):  # readable loop version of the recurrence
            x = (x + c) % 10
        assert p.answer == x
        assert score_chain(p.solution_text(), str(x)) == 1.0
        assert score_chain(p.solution_text(), str((x + 1) % 10)) == 0.0


def test_sizes_are_heavy_tailed():
    sizes = np.array([p.steps for p in generate_problems(20000, seed=0)])
    lengths = 2 * sizes + 3
    assert sizes.min() >= 2 and sizes.max() <= 64
    assert np.median(sizes) <= 4  # most problems short
    assert lengths.max() / lengths.mean() >= 3  # a few many times longer


def test_score_chain_edge_cases():
    assert score_chain("", "3") == 0.0
    assert score_chain("answer", "3") == 0.0
    assert score_chain("1 2 answer 3 answer 4", "4") == 1.0  # the last answer counts


def test_tokenizer_round_trip():
    tok = build_tokenizer()
    for text in ["chain start 2 steps 4", "4 6 3 9 2 1 1 2 answer 2", "x ^ 2 + 300 = y !", "Hello , world"]:
        ids = tok(text, add_special_tokens=False)["input_ids"]
        assert tok.unk_token_id not in ids
        assert tok.decode(ids) == text
    # known words are single tokens, unknown words fall back to characters
    assert len(tok("answer", add_special_tokens=False)["input_ids"]) == 1
    assert tok.decode(tok("zebra", add_special_tokens=False)["input_ids"]) == "zebra"
    text = tok.apply_chat_template([{"role": "user", "content": "chain start 1 steps 2"}], tokenize=False,
                                   add_generation_prompt=True)
    assert text.startswith("<|im_start|>user") and text.endswith("<|im_start|>assistant\n")


def test_saved_folder_loads_with_auto_classes_and_generates(tiny_model_dir):
    names = {p.name for p in tiny_model_dir.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= names
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    assert model.config.model_type == "qwen3" and tok.eos_token == "<|im_end|>"
    ids = tok("chain start 1 steps 2", return_tensors="pt")
    out = model.generate(**ids, max_new_tokens=5, do_sample=False, pad_token_id=tok.pad_token_id)
    assert out.shape[1] > ids["input_ids"].shape[1]
    assert torch.isfinite(model(**ids).logits).all()


def test_yarn_rope_scaling_is_applied(tiny_model_dir):
    from ulorl.models import load_model

    plain = load_model(tiny_model_dir)
    yarn = load_model(tiny_model_dir, rope_scaling_factor=1.5, rope_original_max_len=2048)
    rp = yarn.config.rope_parameters
    assert rp["rope_type"] == "yarn" and rp["factor"] == 1.5 and rp["original_max_position_embeddings"] == 2048
    assert yarn.config.max_position_embeddings == 3072
    ids = torch.arange(5, 300).unsqueeze(0)
    with torch.no_grad():
        a, b = plain(ids).logits, yarn(ids).logits
    assert torch.isfinite(b).all() and not torch.allclose(a, b)  # same weights, different positions
