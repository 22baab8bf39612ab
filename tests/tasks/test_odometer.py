"""The long-output built-in task `odometer` (ulorl/tasks/odometer.py) and the task registry."""

import numpy as np
import pytest

from ulorl.models import build_tokenizer
from ulorl.reward.extract import extract_answer
from ulorl.tasks import BuiltinTask, task_rows
from ulorl.tasks.odometer import DATA_SOURCE, TOKENS_PER_LINE, OdometerProblem, generate_problems, make_rows


def test_worked_solution_by_hand():
    # start 2, 3 steps: counters 3 2 1 0; x: 2, 2+2=4, 4+1=5, 5+0=5
    p = OdometerProblem(start=2, steps=3)
    assert p.prompt_text == "add start 2 steps 0 0 3"
    assert p.solution_text() == "0 0 3 : 2 , 0 0 2 : 4 , 0 0 1 : 5 , 0 0 0 : 5 , answer 5"
    assert p.answer == 5


def test_borrow_across_tens_and_modulo_11():
    # start 0, 12 steps: units digits of 11..0 are 1 0 9 8 7 6 5 4 3 2 1 0
    # x: 0, 1, 1, 10, 18->7, 14->3, 9, 14->3, 7, 10, 12->1, 2, 2   (0 + 46 = 2 mod 11)
    p = OdometerProblem(start=0, steps=12)
    assert [x for _, x in p.lines()] == [0, 1, 1, 10, 7, 3, 9, 3, 7, 10, 1, 2, 2]
    assert p.solution_text().startswith("0 1 2 : 0 , 0 1 1 : 1 , 0 1 0 : 1 , 0 0 9 : 10 , 0 0 8 : 7 ,")
    assert p.answer == 2


def test_borrow_across_hundreds():
    # 101 steps: the counter goes 101 -> 100 -> 099 (both lower digits borrow at once)
    text = OdometerProblem(start=4, steps=101).solution_text()
    assert text.startswith("1 0 1 : 4 , 1 0 0 : 4 , 0 9 9 : 2 ,")  # x: 4, 4+0=4, 4+9=13->2


@pytest.mark.parametrize("seed", [0, 1])
def test_answer_matches_closed_form(seed):
    # x_n = (s + sum of (c mod 10) for c = 0..n-1) mod 11
    for p in generate_problems(200, seed=seed):
        assert p.answer == (p.start + sum(c % 10 for c in range(p.steps))) % 11


def test_a_counter_that_skips_whole_decades_changes_the_answer():
    # mod 10, skipping 20 lines kept the answer (two decades add 90 = 0); mod 11 they add 90 = 2
    p = OdometerProblem(start=3, steps=57)
    for skip in (10, 20, 40):
        skipped = OdometerProblem(start=3, steps=57 - skip)  # the same lines from 57 - skip down
        assert skipped.answer != p.answer


def test_token_count_with_builtin_tokenizer():
    tok = build_tokenizer()
    for n in (1, 9, 10, 99, 100, 680):
        p = OdometerProblem(start=7, steps=n)
        toks = tok.tokenize(p.solution_text())
        assert len(toks) == p.num_tokens == TOKENS_PER_LINE * (n + 1) + 2
        assert toks[TOKENS_PER_LINE - 1 :: TOKENS_PER_LINE][: n + 1] == [","] * (n + 1)  # one `,` per line
        assert tok.unk_token not in toks
    assert len(tok.tokenize(OdometerProblem(start=0, steps=12).prompt_text)) == 7  # add start 0 steps 0 1 2
    # the prompt's 3 digits + the chat template's 3 tokens: line 0 copies the prompt at the line distance
    assert TOKENS_PER_LINE == 3 + 3
    text = tok.apply_chat_template([{"role": "user", "content": "add start 0 steps 0 1 2"}], add_generation_prompt=True,
                                   tokenize=False)
    prompt = tok(text, add_special_tokens=False)["input_ids"]
    tail = tok.convert_ids_to_tokens(prompt[-TOKENS_PER_LINE:])
    assert tail == ["0", "1", "2", "<|im_end|>", "<|im_start|>", "assistant"]


def test_every_token_is_a_function_of_the_last_line():
    # The design claim: after line 0, the next token depends only on the previous
    # TOKENS_PER_LINE tokens, so a small model never needs to look far back.
    seen: dict[tuple[str, ...], str] = {}
    for p in generate_problems(300, seed=3, max_size=250):
        toks = p.solution_text().split() + ["<eos>"]
        for i in range(2 * TOKENS_PER_LINE, len(toks)):
            window = tuple(toks[i - TOKENS_PER_LINE : i])
            assert seen.setdefault(window, toks[i]) == toks[i], window
    assert len(seen) > 1000  # many distinct contexts were checked


def test_generator_is_deterministic():
    a, b = make_rows(50, seed=11), make_rows(50, seed=11)
    assert a == b
    assert make_rows(50, seed=12) != a


def test_length_distribution_is_long_tailed():
    # answer lengths (tokens incl. EOS) of 20,000 default-law problems: tens to thousands, max/mean >= 8
    lengths = np.array([p.num_tokens + 1 for p in generate_problems(20_000, seed=0)])
    assert np.median(lengths) < 50
    assert lengths.max() == TOKENS_PER_LINE * 681 + 3  # the cap, n = 680: 4,089 tokens
    assert lengths.max() / lengths.mean() >= 8
    assert (lengths >= 1000).sum() >= 20  # the tail is not a handful of samples


def test_rows_use_verl_schema_and_are_scored_by_the_builtin_extractor():
    rows = task_rows(BuiltinTask.ODOMETER.value, 20, seed=5, split="eval")
    assert rows == make_rows(20, seed=5, split="eval")
    for r in rows:
        assert r["data_source"] == DATA_SOURCE
        assert r["prompt"][0]["role"] == "user"
        assert r["reward_model"]["ground_truth"] == extract_answer(r["extra_info"]["solution"])
        assert r["extra_info"]["solution"].count(",") == r["extra_info"]["size"] + 1


def test_size_law_settings_left_at_their_defaults_are_not_forwarded():
    chain = BuiltinTask.CHAIN.value  # chain has no `uniform`: the default 0 must not reach it
    assert task_rows(chain, 5, seed=1, alpha=None, uniform=0.0) == task_rows(chain, 5, seed=1)
    with pytest.raises(TypeError):
        task_rows(chain, 5, seed=1, uniform=0.5)
    odo = BuiltinTask.ODOMETER.value
    assert task_rows(odo, 5, seed=1, alpha=None, uniform=0.0) == make_rows(5, seed=1)
    assert task_rows(odo, 50, seed=1, uniform=0.5) == make_rows(50, seed=1, uniform=0.5) != make_rows(50, seed=1)


def test_registry_rejects_unknown_tasks_naming_the_valid_ones():
    with pytest.raises(ValueError, match="builtin:chain.*builtin:odometer"):
        task_rows("builtin:nope", 1, seed=0)


def test_problem_bounds():
    with pytest.raises(ValueError):
        OdometerProblem(start=0, steps=1000)
    with pytest.raises(ValueError):
        generate_problems(1, seed=0, max_size=1000)


def test_sft_sequences_of_the_long_task_cut_long_solutions_without_eos():
    from ulorl.run.sft import sft_sequences

    tok = build_tokenizer()
    seqs = sft_sequences(tok, 200, seed=0, max_size=999, task=BuiltinTask.ODOMETER.value, alpha=0.3,
                         max_response_tokens=100)
    prompts = [tok.decode(p) for p, _ in seqs]
    assert all("add start" in p for p in prompts)
    cut = [r for _, r in seqs if len(r) == 100 and r[-1] != tok.eos_token_id]
    whole = [r for _, r in seqs if r[-1] == tok.eos_token_id]
    assert len(cut) + len(whole) == 200 and cut and whole
    # a solution of n steps has 6n + 9 tokens with EOS: the whole ones are those with n <= 15
    assert all(len(r) <= 99 and (len(r) - 9) % 6 == 0 for r in whole)


def test_sft_config_names_the_valid_tasks():
    from ulorl.config import ConfigError, SFTConfig

    assert SFTConfig(task="builtin:odometer", alpha=0.3, max_response_tokens=200).task == "builtin:odometer"
    with pytest.raises(ConfigError, match="builtin:odometer"):
        SFTConfig(task="builtin:nope")


def test_long_model_preset(tmp_path, monkeypatch):
    import json

    from ulorl.models import load_model, resolve_model_path
    from ulorl.models.tiny import PRESETS, TinyModelSpec

    assert PRESETS["default"] == TinyModelSpec()  # the demo's model is unchanged
    monkeypatch.setenv("ULORL_CACHE", str(tmp_path))
    d = resolve_model_path("builtin:long")
    assert d == tmp_path / "tiny-qwen3-v3-long"
    cfg = json.loads((d / "config.json").read_text())
    assert cfg["rope_parameters"]["rope_theta"] == 10.0 and cfg["max_position_embeddings"] == 8192
    model = load_model("builtin:long")
    assert float(model.model.layers[0].self_attn.q_norm.weight.detach().mean()) == 2.0
    with pytest.raises(ValueError, match="builtin:huge: no such built-in model preset; choose one of: builtin, "
                                         "builtin:long"):
        resolve_model_path("builtin:huge")


def test_uniform_share_mixes_a_flat_law_into_the_sizes_and_zero_changes_nothing():
    # uniform=0 draws exactly the problems the generator always drew (no extra random numbers)
    assert generate_problems(300, seed=3, uniform=0.0) == generate_problems(300, seed=3)
    flat = np.array([p.steps for p in generate_problems(4000, seed=3, uniform=1.0)])
    assert flat.min() >= 2 and flat.max() <= 680
    assert abs(flat.mean() - 341) < 15  # uniform on [2, 680]
    assert (flat == 680).mean() < 0.01  # no spike at the cap, unlike a small alpha
    mixed = np.array([p.steps for p in generate_problems(4000, seed=3, uniform=0.3)])
    pareto = np.array([p.steps for p in generate_problems(4000, seed=3)])
    assert 0.2 < (mixed >= 170).mean() < 0.3 and (pareto >= 170).mean() < 0.02
    with pytest.raises(ValueError, match="uniform"):
        generate_problems(1, seed=0, uniform=1.5)


def test_data_size_law_reaches_both_builtin_splits():
    from ulorl.config import ConfigError
    from ulorl.config import DataConfig
    from ulorl.data.loaders import EVAL_SEED_OFFSET, builtin_rows

    def sizes(cfg, split):
        return np.array([r["extra_info"]["size"] for r in builtin_rows(BuiltinTask.ODOMETER.value, cfg, split)])

    base = DataConfig(train="builtin:odometer", eval="builtin:odometer", train_size=500, eval_size=300)
    flat = DataConfig(train="builtin:odometer", eval="builtin:odometer", train_size=500, eval_size=300,
                      alpha=0.5, uniform=0.2)
    for split in ("train", "eval"):
        assert (sizes(flat, split) >= 166).sum() > 5 * max((sizes(base, split) >= 166).sum(), 1)
    # without a size law the splits are the task's own, as before
    assert builtin_rows(BuiltinTask.ODOMETER.value, base, "eval") == \
        task_rows(BuiltinTask.ODOMETER.value, 300, seed=base.seed + EVAL_SEED_OFFSET, split="eval")
    # data.train_uniform changes the train split only
    long_train = DataConfig(train="builtin:odometer", eval="builtin:odometer", train_size=500, eval_size=300,
                            alpha=0.5, uniform=0.2, train_uniform=0.8)
    assert builtin_rows(BuiltinTask.ODOMETER.value, long_train, "eval") == builtin_rows(BuiltinTask.ODOMETER.value,
                                                                                        flat, "eval")
    assert (sizes(long_train, "train") >= 166).sum() > 2 * (sizes(flat, "train") >= 166).sum()
    with pytest.raises(ConfigError, match="data.uniform"):
        DataConfig(uniform=2.0)
    with pytest.raises(ConfigError, match="data.train_uniform"):
        DataConfig(train_uniform=-1.0)
    with pytest.raises(ConfigError, match="data.alpha"):
        DataConfig(alpha=0.0)


def test_sft_curriculum_trains_short_problems_first(monkeypatch, tmp_path):
    from ulorl.config import ConfigError, ModelConfig, SFTConfig
    from ulorl.run import sft as sft_mod

    with pytest.raises(ConfigError, match="short_steps"):
        SFTConfig(steps=10, short_steps=11)
    with pytest.raises(ConfigError, match="sft.uniform"):
        SFTConfig(uniform=-0.1)
    seen = []
    real_batch = sft_mod._batch

    def spy(seqs, pad_id):
        seen.append(max(len(r) for _, r in seqs))
        return real_batch(seqs, pad_id)

    monkeypatch.setattr(sft_mod, "_batch", spy)
    cfg = SFTConfig(task="builtin:odometer", steps=12, short_steps=8, short_max_size=5, max_size=100, alpha=0.5,
                    uniform=0.5, bucketed=True, batch_tokens=1024, batch_size=4, num_examples=60, lr=1e-3)
    sft_mod.run_sft(ModelConfig(path="builtin:long"), cfg, tmp_path, progress=False)
    assert len(seen) == 12
    assert max(seen[:8]) <= 6 * 5 + 9  # short phase: n <= 5, at most 39 response tokens with EOS
    assert max(seen[8:]) > 39  # then the full law


def test_short_phase_goes_on_until_its_loss_is_low_and_no_further_than_its_cap(tmp_path, capsys):
    import json
    import types

    from ulorl.config import ConfigError, ModelConfig, SFTConfig
    from ulorl.run import sft as sft_mod

    base = dict(task="builtin:odometer", steps=10, short_steps=4, short_max_size=5, max_size=40, alpha=0.5,
                bucketed=True, batch_tokens=512, batch_size=4, num_examples=40, lr=1e-3, warmup_steps=2)
    for bad, match in [(dict(short_until_loss=0.1), "short_max_steps"),
                       (dict(short_until_loss=0.1, short_max_steps=3), "at least sft.short_steps=4"),
                       (dict(short_max_steps=8), "short_until_loss"),
                       (dict(short_until_loss=0.1, short_max_steps=8, short_steps=0), "short_steps > 0"),
                       (dict(short_until_loss=-1.0, short_max_steps=8), "short_until_loss")]:
        with pytest.raises(ConfigError, match=match):
            SFTConfig(**{**base, **bad})

    # the rule by hand: the mean of the last SHORT_LOSS_WINDOW losses against the bound
    cfg = SFTConfig(**base, short_until_loss=0.5, short_max_steps=6)
    bar = types.SimpleNamespace(total=10)
    high = [0.0] * 50 + [1.0] * sft_mod.SHORT_LOSS_WINDOW  # only the window counts: its mean is 1.0
    assert sft_mod._short_phase_goes_on(high, 4, cfg, bar) and bar.total == 11
    assert "1.0000 >= sft.short_until_loss=0.5" in capsys.readouterr().out
    low = [1.0] * 50 + [0.6] * (sft_mod.SHORT_LOSS_WINDOW // 2) + [0.3] * (sft_mod.SHORT_LOSS_WINDOW // 2)
    assert not sft_mod._short_phase_goes_on(low, 5, cfg, bar) and bar.total == 11  # mean 0.45 < 0.5
    assert "ends after 5 steps" in capsys.readouterr().out
    assert not sft_mod._short_phase_goes_on(high, 6, cfg, bar)  # the cap
    assert "stops at sft.short_max_steps=6" in capsys.readouterr().out
    assert not sft_mod._short_phase_goes_on(high, 4, SFTConfig(**base), bar)  # no bound: short_steps only

    def train(out, **extra):
        sft_mod.run_sft(ModelConfig(path="builtin:long"), SFTConfig(**base, **extra), out, progress=False)
        rows = [json.loads(line) for line in open(out / "metrics.jsonl")]
        return rows, (out / "model" / "model.safetensors").read_bytes()

    plain, plain_weights = train(tmp_path / "plain")
    assert [r["sft/phase"] for r in plain] == ["short"] * 4 + ["full"] * 6
    # a bound every loss meets: the same steps, the same weights
    met, met_weights = train(tmp_path / "met", short_until_loss=100.0, short_max_steps=8)
    assert met_weights == plain_weights and len(met) == 10
    # a bound no loss meets: the short phase runs to its cap with the schedule held, then the full phase's 6 steps
    never, _ = train(tmp_path / "never", short_until_loss=1e-9, short_max_steps=7)
    assert [r["sft/phase"] for r in never] == ["short"] * 7 + ["full"] * 6
    assert [r["step"] for r in never] == list(range(1, 14))
    lrs = [r["sft/lr"] for r in never]
    cfg = SFTConfig(**base)
    assert lrs[:4] == [sft_mod.lr_at(s, cfg) for s in range(4)] and lrs[4:7] == [lrs[3]] * 3
    assert lrs[7:] == [sft_mod.lr_at(s, cfg) for s in range(4, 10)] == [r["sft/lr"] for r in plain[4:]]
    assert [r["sft/loss"] for r in never[:4]] == [r["sft/loss"] for r in plain[:4]]


def test_diagnose_finds_the_first_wrong_line_and_sorts_wrong_answers_by_line_count():
    from ulorl.tasks.odometer import diagnose, solution_lines

    p = OdometerProblem(start=2, steps=3)
    ref = p.solution_text()  # 0 0 3 : 2 , 0 0 2 : 4 , 0 0 1 : 5 , 0 0 0 : 5 , answer 5
    assert solution_lines(ref) == [("003", "2"), ("002", "4"), ("001", "5"), ("000", "5")]
    right = diagnose(ref, ref, eos=True, right=True)
    assert (right.kind, right.lines, right.reference_lines, right.first_wrong) == ("right", 4, 4, None)
    slip = diagnose("0 0 3 : 2 , 0 0 2 : 5 , 0 0 1 : 6 , 0 0 0 : 6 , answer 6", ref, eos=True, right=False)
    assert (slip.kind, slip.first_wrong, slip.first_wrong_slot) == ("slip", 1, "value")
    copy = diagnose("0 0 3 : 3 , 0 0 2 : 5 , 0 0 1 : 6 , 0 0 0 : 6 , answer 6", ref, eos=True, right=False)
    assert (copy.first_wrong, copy.first_wrong_slot) == (0, "value")  # the start value copied wrong
    skip = diagnose("0 0 3 : 2 , 0 0 0 : 2 , answer 2", ref, eos=True, right=False)
    assert (skip.kind, skip.lines, skip.first_wrong, skip.first_wrong_slot) == ("short", 2, 1, "counter")
    over = diagnose(" ".join(["0 0 3 : 2 ,"] * 5) + " answer 2", ref, eos=True, right=False)
    assert (over.kind, over.lines) == ("over", 5)
    cut = diagnose("0 0 3 : 2 , 0 0 2 : 4 ,", ref, eos=False, right=False)
    assert (cut.kind, cut.first_wrong) == ("truncated", None)
    # a lucky guess is still `right`; a line of another shape ends the parse
    assert diagnose("0 0 3 : 2 , answer 5", ref, eos=True, right=True).kind == "right"
    assert solution_lines("0 0 3 : 2 , 0 0 2 x 4 , 0 0 1 : 5 ,") == [("003", "2")]


def test_heads_are_the_first_lines_of_problems_of_every_size_and_join_both_phases(monkeypatch, tmp_path):
    from ulorl.config import ConfigError, ModelConfig, SFTConfig
    from ulorl.run import sft as sft_mod
    from ulorl.run.sft import head_sequences

    tok = build_tokenizer()
    heads = head_sequences(tok, 300, seed=0, max_size=600, lines=4)
    prompts = [tok.decode(p, skip_special_tokens=True).split() for p, _ in heads]  # ... add start s steps h t u ...
    at = [q.index("steps") for q in prompts]
    sizes = [int("".join(q[i + 1 : i + 4])) for q, i in zip(prompts, at)]
    assert min(sizes) < 60 and max(sizes) > 540  # uniform on [2, 600], not the Pareto law's short problems
    for (_, r), n, q, i in zip(heads, sizes, prompts, at):
        whole = OdometerProblem(start=int(q[i - 1]), steps=n).solution_text()
        if 6 * (n + 1) + 3 > 24:  # longer than 4 lines of 6 tokens: those lines, no EOS
            assert len(r) == 24 and tok.eos_token_id not in r and tok.decode(r) == " ".join(whole.split()[:24])
        else:  # n = 2 (21 tokens with `answer x` and EOS): the whole solution
            assert r[-1] == tok.eos_token_id
    with pytest.raises(ConfigError, match="sft.heads"):
        SFTConfig(heads=1.5)
    with pytest.raises(ConfigError, match="builtin:odometer"):
        SFTConfig(heads=0.2)  # the default task is chain
    seen = []
    real_batch = sft_mod._batch

    def size(prompt):
        q = tok.decode(prompt, skip_special_tokens=True).split()
        return int("".join(q[q.index("steps") + 1 : q.index("steps") + 4]))

    def spy(seqs, pad_id):
        seen.append([(len(r), size(p)) for p, r in seqs])
        return real_batch(seqs, pad_id)

    monkeypatch.setattr(sft_mod, "_batch", spy)
    cfg = SFTConfig(task="builtin:odometer", steps=40, short_steps=20, short_max_size=5, max_size=100, alpha=0.5,
                    bucketed=True, batch_tokens=1024, batch_size=4, num_examples=40, lr=1e-3, heads=0.5,
                    head_lines=3, head_max_size=400)
    sft_mod.run_sft(ModelConfig(path="builtin:long"), cfg, tmp_path, progress=False)
    # a head of 3 lines has 18 tokens without EOS; no whole solution has 18 (6n + 9)
    heads_seen = [n for s in seen for r, n in s if r == 18]
    assert any(r == 18 for s in seen[:20] for r, _ in s) and any(r == 18 for s in seen[20:] for r, _ in s)
    assert max(heads_seen) > 100  # head_max_size, not max_size, bounds the heads' problems
    assert max(n for s in seen for r, n in s if r != 18) <= 100
    assert max(r for s in seen[:20] for r, _ in s) <= 6 * 5 + 9  # the short phase's whole solutions stay short


def test_tail_is_whole_solutions_past_max_size_in_the_full_phase_only(monkeypatch, tmp_path):
    from ulorl.config import ConfigError, ModelConfig, SFTConfig
    from ulorl.run import sft as sft_mod
    from ulorl.run.sft import tail_sequences

    tok = build_tokenizer()

    def size(prompt):
        q = tok.decode(prompt, skip_special_tokens=True).split()
        return int("".join(q[q.index("steps") + 1 : q.index("steps") + 4]))

    tail = tail_sequences(tok, 200, seed=0, min_size=101, max_size=160)
    sizes = [size(p) for p, _ in tail]
    assert min(sizes) == 101 and max(sizes) == 160  # uniform on [101, 160]: both ends drawn in 200
    for p, r in tail:  # the whole worked solution with EOS: 6 tokens a line, n + 1 lines, `answer x`, EOS
        assert len(r) == 6 * (size(p) + 1) + 3 and r[-1] == tok.eos_token_id
    with pytest.raises(ConfigError, match="sft.tail must"):
        SFTConfig(task="builtin:odometer", tail=-0.1)
    with pytest.raises(ConfigError, match="builtin:odometer"):
        SFTConfig(tail=0.1, tail_max_size=200)  # the default task is chain
    with pytest.raises(ConfigError, match=r"tail_max_size in \(sft.max_size=100, 999\], got 100"):
        SFTConfig(task="builtin:odometer", max_size=100, tail=0.1, tail_max_size=100)
    with pytest.raises(ConfigError, match="got None"):
        SFTConfig(task="builtin:odometer", tail=0.1)
    seen = []
    real_batch = sft_mod._batch

    def spy(seqs, pad_id):
        seen.append([(size(p), r[-1] == tok.eos_token_id) for p, r in seqs])
        return real_batch(seqs, pad_id)

    monkeypatch.setattr(sft_mod, "_batch", spy)
    # 40 whole solutions of n <= 30 and 20 of n in (30, 60]; bucketed, so each epoch visits every example
    cfg = SFTConfig(task="builtin:odometer", steps=40, short_steps=10, short_max_size=5, max_size=30, alpha=0.5,
                    bucketed=True, batch_tokens=1024, batch_size=4, num_examples=40, lr=1e-3, tail=0.5,
                    tail_max_size=60)
    sft_mod.run_sft(ModelConfig(path="builtin:long"), cfg, tmp_path, progress=False)
    assert max(n for s in seen[:10] for n, _ in s) <= 5  # the short phase has no tail
    past = [(n, eos) for s in seen[10:] for n, eos in s if n > 30]
    assert len({n for n, _ in past}) >= 5 and max(n for n, _ in past) <= 60 and all(eos for _, eos in past)


def test_sft_checks_log_p_at_length_and_tail_until_p_long_drops_the_tail_there(tmp_path, monkeypatch):
    """`sft.check_every` logs the validation problems' exact mean P(worked solution) every so many full-phase steps;
    `sft.tail_until_p_long` trains the rest of the full phase without the tail from the first check that reaches it
    (0: the first, 1: none)."""
    import json
    import math

    import torch

    from ulorl.config import ConfigError, ModelConfig, SFTConfig
    from ulorl.models import load_model
    from ulorl.rollout.engines.base import SamplingParams
    from ulorl.run import sft as sft_mod
    from ulorl.run.sft import check_sequences, mean_p_reference, run_sft, sft_outcome

    with pytest.raises(ConfigError, match="needs sft.check_every > 0 and sft.tail > 0"):
        SFTConfig(task="builtin:odometer", max_size=300, tail_until_p_long=0.5, tail=0.1, tail_max_size=400)
    with pytest.raises(ConfigError, match="needs sft.check_every > 0 and sft.tail > 0"):
        SFTConfig(task="builtin:odometer", max_size=300, check_every=10, tail_until_p_long=0.5)
    with pytest.raises(ConfigError, match="check_min_size=200 is past the SFT's largest problem \\(100 steps\\)"):
        SFTConfig(task="builtin:odometer", max_size=100, check_every=10, check_min_size=200)
    with pytest.raises(ConfigError, match="for builtin:chain it needs sft.until_p"):
        SFTConfig(check_every=10)
    with pytest.raises(ConfigError, match="tail_max_size.*got None"):  # the tail's own error first
        SFTConfig(task="builtin:odometer", tail=0.1, check_every=10)
    with pytest.raises(ConfigError, match="sft.tail_until_p_long must be in"):
        SFTConfig(task="builtin:odometer", max_size=300, check_every=10, tail=0.1, tail_max_size=400,
                  tail_until_p_long=1.5)

    tok = build_tokenizer()
    cfg = SFTConfig(task="builtin:odometer", max_size=30, tail=0.5, tail_max_size=60, check_every=4,
                    check_problems=6, check_min_size=40)
    checks = check_sequences(tok, cfg)
    assert len(checks) == 6
    for p, r in checks:  # whole solutions with EOS of sizes in [40, 60]: 6(n + 1) + 3 tokens
        assert r[-1] == tok.eos_token_id and 6 * 41 + 3 <= len(r) <= 6 * 61 + 3
    # the mean of exp(sum of log q) over the problems, against one forward pass per sequence by hand
    model = load_model("builtin:long")
    params = SamplingParams(temperature=0.85, top_p=1.0, top_k=-1)
    short = [(p, r[:4]) for p, r in checks[:2]]  # 4 tokens: P well above float underflow for an untrained model
    by_hand = []
    with torch.no_grad():
        for p, r in short:
            logits = model(input_ids=torch.tensor([p + r])).logits[0, len(p) - 1 : -1].float() / 0.85
            by_hand.append(math.exp(float(torch.log_softmax(logits, -1).gather(-1, torch.tensor(r)[:, None]).sum())))
    model.train()
    assert min(by_hand) > 1e-20
    assert mean_p_reference(model, short, params) == pytest.approx(sum(by_hand) / 2, rel=1e-4)
    assert model.training  # scored in eval mode, the training mode restored

    base = dict(task="builtin:odometer", steps=30, short_steps=2, short_max_size=5, max_size=30, alpha=0.5,
                bucketed=True, batch_tokens=1024, batch_size=4, num_examples=20, lr=1e-3, tail=0.5, tail_max_size=60,
                check_every=4, check_problems=3, check_min_size=40)
    seen, real_batch = [], sft_mod._batch

    def spy(seqs, pad_id):  # each step's longest response
        seen.append(max(len(r) for _, r in seqs))
        return real_batch(seqs, pad_id)

    monkeypatch.setattr(sft_mod, "_batch", spy)

    def rows(name, **kw):
        seen.clear()
        run_sft(ModelConfig(path="builtin:long"), SFTConfig(**{**base, **kw}), tmp_path / name, progress=False)
        return [json.loads(l) for l in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]

    tail_tokens = 6 * (31 + 1) + 3  # the shortest tail solution: n = 31, n + 1 lines
    kept = rows("kept", tail_until_p_long=1.0)  # P = 1 exactly is never reached: the tail stays
    assert len(kept) == 30 and [r["step"] for r in kept if "sft/p_long" in r] == list(range(6, 31, 4))
    assert any(n >= tail_tokens for n in seen[6:])
    saved = load_model(str(tmp_path / "kept" / "model"))  # the last check's model, under SamplingParams()'s sampler
    assert kept[-1]["sft/p_long"] == pytest.approx(mean_p_reference(saved, check_sequences(tok, SFTConfig(**base)),
                                                                    SamplingParams()), rel=1e-5, abs=1e-30)
    dropped = rows("dropped", tail_until_p_long=0.0)  # every check reaches 0: the tail leaves at the first
    assert len(dropped) == 30
    assert any(n >= tail_tokens for n in seen[2:6])  # the full phase's first 4 steps draw from the tail too
    assert all(n < tail_tokens for n in seen[6:])  # then never
    assert [r["sft/loss"] for r in dropped[:6]] == [r["sft/loss"] for r in kept[:6]]  # the same steps until then
    # once the tail has left, the checks decide nothing: measured again at the last step only (steps 10-26 skipped)
    assert [r["step"] for r in dropped if "sft/p_long" in r] == [6, 30]
    assert sft_outcome(tmp_path / "dropped") == {"steps": 30, "p_long": dropped[-1]["sft/p_long"], "p_valid": None}
    # a check changes nothing that is trained: the same steps without any check, to the bit
    unchecked = rows("unchecked", check_every=0)
    assert [r["sft/loss"] for r in unchecked] == [r["sft/loss"] for r in kept]
    assert not any("sft/p_long" in r for r in unchecked)


def test_p_long_is_measured_while_it_decides_and_at_the_last_step():
    """`_p_long_due` by hand: every check while the tail is in (or without tail_until_p_long, a log only); after the
    tail left, the SFT's last step only: the planned end without `sft.until_p`, else the check that meets it or the
    `sft.max_steps` cap."""
    from ulorl.config import SFTConfig
    from ulorl.run.sft import _p_long_due

    base = dict(task="builtin:odometer", steps=30, short_steps=2, max_size=30, tail=0.5, tail_max_size=60,
                check_every=4, check_min_size=40)
    log_only, until_tail = SFTConfig(**base), SFTConfig(**base, tail_until_p_long=0.5)
    until_p = SFTConfig(**base, tail_until_p_long=0.5, until_p=0.9, max_steps=40)
    for cfg in (log_only, until_tail, until_p):  # the tail in: the periodic checks, nothing else
        assert [_p_long_due(periodic, True, False, 28, 28, 30, cfg) for periodic in (True, False)] == [True, False]
    assert _p_long_due(True, False, False, 8, 28, 10, log_only)  # no tail rule: the tail never "left"
    # until_tail, the tail gone: the periodic checks no more, the planned end (taken = planned) yes
    assert [_p_long_due(True, False, False, t, 28, t + 2, until_tail) for t in (8, 27, 28)] == [False, False, True]
    # until_p, the tail gone: past the plan the SFT goes on, so only the check that meets until_p or the cap's step
    assert not _p_long_due(True, False, False, 28, 28, 30, until_p)
    assert _p_long_due(True, False, True, 20, 28, 22, until_p)
    assert [_p_long_due(False, False, False, 37, 28, trained, until_p) for trained in (39, 40)] == [False, True]


def test_the_smallest_size_the_sft_config_allows_is_every_tasks_smallest():
    """`sft.max_size` below `SMALLEST_SIZE` is refused by the config (it was a ValueError from the task's size
    law after the SFT started); at `SMALLEST_SIZE` every built-in task makes its problems."""
    from ulorl.tasks import SMALLEST_SIZE, TASKS, task_rows

    for task in TASKS:
        assert len(task_rows(task, 4, seed=0, max_size=SMALLEST_SIZE)) == 4
        with pytest.raises(ValueError, match="min_size <= max_size"):
            task_rows(task, 4, seed=0, max_size=SMALLEST_SIZE - 1)
