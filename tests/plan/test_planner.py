"""The planner: simulation against hand-computed cases, cost fits, length sources, the `ulorl plan` CLI."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from ulorl.cli import main
from ulorl.config import PipelineMode
from ulorl.plan import (CostError, CostModel, LengthSpecError, Workload, fit_linear, fit_to_table,
                        lengths_from_run, overlap_bound, parse_lengths, predict, recommend, simulate, simulate_all)
from ulorl.plan.simulate import choose_scale


class Cycle:
    """A deterministic 'distribution': groups of G lengths taken in order from `groups`, cycled."""

    def __init__(self, groups):
        self.groups, self.i = groups, 0

    def sample_groups(self, n, G, rng):
        out = [self.groups[(self.i + k) % len(self.groups)] for k in range(n)]
        self.i += n
        return np.array(out)


def test_equal_lengths_fill_every_slot_and_gain_nothing():
    # every answer is 40 tokens: a synchronous round wastes no slot, so segmenting cannot remove any waste.
    # M=8 (segments of 20) needs two rounds per step of 64 rows, half of them continued: 2 x 20 = 40 iterations.
    sims = simulate_all(Workload(parse_lengths("fixed:length=40"), 160, 8, 64, 8, steps=6, warmup=3),
                        [1, 2, 4, 8], padded=True)
    for m, r in sims.items():
        assert r.utilisation == 1.0
        assert r.counts["iterations"] == 40 and r.counts["row_iters"] == 64 * 40
    assert sims[8].counts["rounds"] == 2 and sims[8].reprefill_share == pytest.approx(0.5)  # 32 rows x 20 / 2560
    rows = predict(sims, CostModel(decode_fixed=1.0))
    assert [r.speedup for r in rows] == [1.0, 1.0, 1.0, 1.0]


def test_geometric_lengths_end_each_token_with_probability_one_over_mean():
    # P(length = k) = (1 - p)^(k - 1) p with p = 1 / mean: P(1) = 0.25, P(2) = 0.1875 at mean 4, and memoryless:
    # P(length > 6 | length > 3) = P(length > 3) = 0.75^3; the cap folds the tail onto max
    x = parse_lengths("geometric:mean=4").sample_groups(25_000, 8, np.random.default_rng(0)).ravel()
    assert x.min() == 1
    assert np.mean(x == 1) == pytest.approx(0.25, abs=0.005) and np.mean(x == 2) == pytest.approx(0.1875, abs=0.005)
    assert np.mean(x) == pytest.approx(4.0, rel=0.01)
    assert np.mean(x[x > 3] > 6) == pytest.approx(0.75 ** 3, abs=0.01) == pytest.approx(np.mean(x > 3), abs=0.01)
    capped = parse_lengths("geometric:mean=4,max=3").sample_groups(10_000, 8, np.random.default_rng(0)).ravel()
    assert set(np.unique(capped)) == {1, 2, 3} and np.mean(capped == 3) == pytest.approx(0.75 ** 2, abs=0.01)


def test_one_group_decode_batch_cannot_refill_freed_slots():
    # G=2, decode batch 2, one group per update, each group = (5, 20) tokens, L=20.
    # M=1: one round of 20 iterations; slots 2 x 20 = 40, useful 25 -> utilisation 0.625.
    # M=2 (segments of 10): round 1 has both rows for 10 iterations (the 5 ends); round 2 only the continued row
    # (no room for a whole new group: (2 - 1) // 2 = 0) for 10 more -> still 20 iterations per step;
    # slots 2 x 10 + 1 x 10 = 30 -> utilisation 25/30; re-prefill 10 of 25 decoded tokens.
    kw = dict(L=20, G=2, decode_batch=2, train_groups=1, steps=4, warmup=1)
    m1 = simulate(Cycle([[5, 20]]), M=1, **kw)
    m2 = simulate(Cycle([[5, 20]]), M=2, **kw)
    assert (m1.counts["iterations"], m1.counts["row_iters"], m1.utilisation) == (20, 25, 0.625)
    assert (m2.counts["iterations"], m2.counts["rounds"]) == (20, 2)
    assert m2.utilisation == pytest.approx(25 / 30) and m2.reprefill_share == pytest.approx(10 / 25)


def test_two_point_lengths_with_refill_keep_every_slot_busy():
    # G=1, decode batch 2, two samples per update, lengths alternate 5, 20; L=20.
    # M=1: each round = one 5 and one 20 -> 20 iterations per step, utilisation 25/40.
    # M=4 (segments of 5): every row runs exactly 5 iterations per round (a 5 ends at 5, a 20 is cut at 5) and a
    # freed slot is refilled by a new prompt, so utilisation is 1: 25 tokens per step = 12.5 iterations per step.
    kw = dict(L=20, G=1, decode_batch=2, train_groups=2, steps=40, warmup=4)
    m1 = simulate(Cycle([[5], [20]]), M=1, **kw)
    m4 = simulate(Cycle([[5], [20]]), M=4, **kw)
    assert (m1.counts["iterations"], m1.utilisation) == (20, 0.625)
    assert m4.utilisation == 1.0
    assert m4.counts["iterations"] == pytest.approx(12.5, abs=0.25)
    assert m4.mean_staleness > 0  # a 20 spans several updates


def test_counts_are_in_real_tokens_when_simulating_in_units():
    assert choose_scale(160, 8, 256) == 1 and choose_scale(65536, 8, 256) == 256
    # L=1024 at resolution 256 -> units of 4 tokens; a 400-token answer is 100 units = 400 tokens again
    r = simulate(parse_lengths("fixed:length=400"), L=1024, M=4, G=2, decode_batch=4, train_groups=2, steps=3,
                 warmup=1, resolution=256, prompt_len=10)
    assert r.scale == 4
    assert r.counts["row_iters"] == 4 * 400 and r.counts["trained_tokens"] == 4 * (10 + 400)
    # two rounds per step: 4 fresh rows x 256 tokens, then the same 4 rows continued (padded prefix 10 + 256)
    assert r.counts["rounds"] == 2 and r.counts["prefill_tokens"] == 4 * 10 + 4 * (10 + 256)
    assert r.utilisation == 1.0


def test_padded_engine_pays_for_the_longest_prefix():
    # one continued row of 100 tokens next to fresh 10-token prompts: padded prefill is rows x 110
    dist = Cycle([[50, 150]])
    kw = dict(L=200, M=2, G=2, decode_batch=4, train_groups=1, steps=6, warmup=2, prompt_len=10)
    pad, paged = simulate(dist, padded=True, **kw), simulate(Cycle([[50, 150]]), padded=False, **kw)
    assert pad.counts["iterations"] == paged.counts["iterations"]
    assert pad.counts["prefill_tokens"] > paged.counts["prefill_tokens"]
    assert pad.counts["ctx_sum"] > paged.counts["ctx_sum"]


def test_fit_recovers_known_coefficients():
    true = CostModel(round_fixed=0.01, decode_fixed=0.005, decode_row=2e-4, decode_ctx=1e-6, update_fixed=0.3)
    rng = np.random.default_rng(0)
    rows = [{"rounds": rng.integers(1, 4), "iterations": rng.integers(20, 200), "row_iters": rng.integers(100, 5000),
             "ctx_sum": rng.integers(1e4, 1e6), "updates": 1} for _ in range(12)]
    times = [true.time(r) for r in rows]
    free = ["round_fixed", "decode_fixed", "decode_row", "decode_ctx", "update_fixed"]
    got = fit_linear(rows, times, free)
    for f in free:
        assert getattr(got, f) == pytest.approx(getattr(true, f), rel=1e-6)
    # a coefficient that does not matter and would come out negative under noise is clamped to zero
    noisy = fit_linear(rows, [t * (1 + 0.01 * rng.standard_normal()) for t in times], free + ["prefill_token"])
    assert all(getattr(noisy, f) >= 0 for f in free + ["prefill_token"])


def test_fit_to_table_recovers_decode_and_update_costs():
    w = Workload(parse_lengths("lognormal:median=400,sigma=0.8"), 2048, 8, 64, 8, steps=6, warmup=3)
    sims = simulate_all(w, [1, 2, 4], padded=False)
    true = CostModel(decode_fixed=0.02, update_fixed=5.0, padded=False)
    table = {m: true.time(sims[m].counts) for m in (1, 2)}
    got = fit_to_table(sims, table, ["decode_fixed", "update_fixed"], CostModel(padded=False))
    assert got.decode_fixed == pytest.approx(0.02) and got.update_fixed == pytest.approx(5.0)
    rows = predict(sims, got)
    assert rows[2].step_s == pytest.approx(true.time(sims[4].counts))
    assert recommend(rows, tolerance=0.0) == min(rows, key=lambda r: r.step_s).M


def test_recommend_prefers_the_smallest_m_within_tolerance():
    from ulorl.plan import PlanRow

    rows = [PlanRow(m, t, 1.0, 1, 0, 0, 1, 1, {}) for m, t in ((1, 10.0), (2, 6.1), (4, 6.0), (8, 5.9))]
    assert recommend(rows, 0.05) == 2 and recommend(rows, 0.0) == 8


def test_sync_sums_the_phases_and_overlap_hides_the_shorter_side():
    cost = CostModel(prefill_token=0.01, decode_fixed=0.5, reward_sample=0.1, update_fixed=3.0, sync_fixed=0.4)
    counts = {"prefill_tokens": 100, "iterations": 10, "finished": 8, "updates": 1, "syncs": 1}
    # prefill 0.01 x 100 = 1.0, decode 0.5 x 10 = 5.0, reward 0.1 x 8 = 0.8 -> generation 6.8; update 3.0; sync 0.4
    assert cost.phases(counts) == pytest.approx({"prefill": 1.0, "decode": 5.0, "reward": 0.8, "update": 3.0,
                                                 "sync": 0.4})
    assert cost.step_time(counts) == pytest.approx(10.2) == pytest.approx(cost.time(counts))  # 6.8 + 3.0 + 0.4
    assert cost.step_time(counts, "overlap") == pytest.approx(7.2)  # max(6.8, 3.0) + 0.4
    assert overlap_bound(cost.phases(counts)) == pytest.approx(9.8 / 6.8)  # (6.8 + 3.0) / max(6.8, 3.0)
    # update-bound: update 9.0 -> sync 6.8 + 9.0 + 0.4 = 16.2, overlap max(6.8, 9.0) + 0.4 = 9.4, bound 15.8 / 9.0
    slow = CostModel(**{**cost.to_dict(), "update_fixed": 9.0})
    sync, overlap = slow.step_time(counts, PipelineMode.SYNC), slow.step_time(counts, PipelineMode.OVERLAP)
    assert (sync, overlap) == pytest.approx((16.2, 9.4))
    assert overlap_bound(slow.phases(counts)) == pytest.approx(15.8 / 9.0)
    assert CostModel().sync_fixed == 0.0  # weights shared or copied in memory: no sync cost unless set
    with pytest.raises(CostError, match="sync, overlap"):
        cost.step_time(counts, "async")


def test_overlap_rows_and_recommendation_per_pipeline():
    # the two-point case above: decode 1 s per iteration -> generation 20 s at M=1, ~12.5 s at M=4; update 25 s.
    # sync: 45 s and ~37.5 s -> M=4 (1.2x). overlap: max(20, 25) = 25 s and max(12.5, 25) = 25 s -> the update hides
    # the rollout gain, so the smallest M within tolerance is M=1 (fresher segments). Bounds 45/25 = 1.8, 37.5/25.
    kw = dict(L=20, G=1, decode_batch=2, train_groups=2, steps=40, warmup=4)
    sims = {m: simulate(Cycle([[5], [20]]), M=m, **kw) for m in (1, 4)}
    cost = CostModel(decode_fixed=1.0, update_fixed=25.0)
    sync, over = predict(sims, cost), predict(sims, cost, "overlap")
    assert [r.pipeline for r in sync + over] == ["sync"] * 2 + ["overlap"] * 2
    assert sync[0].step_s == 45.0 and sync[1].step_s == pytest.approx(37.5, abs=0.25)
    assert [r.step_s for r in over] == [25.0, 25.0] and [r.speedup for r in over] == [1.0, 1.0]
    assert sync[0].overlap_bound == over[0].overlap_bound == pytest.approx(1.8)
    assert sync[1].overlap_bound == pytest.approx(37.5 / 25, abs=0.01)
    assert recommend(sync) == 4 and recommend(over) == 1
    # every segment is one policy version older under overlap
    assert [o.staleness - s.staleness for s, o in zip(sync, over)] == pytest.approx([1.0, 1.0])
    assert sync[0].staleness == 0.0 and over[0].staleness == 1.0


def write_run(tmp_path, n_groups=12):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text("rollout:\n  max_response_len: 160\n  decode_batch: 32\n  group_size: 4\n"
                                     "train:\n  train_groups: 4\n")
    recs = []
    for g in range(n_groups):
        for k in range(4):
            recs.append({"sample_id": f"g{g}/{k}", "group_id": f"g{g}", "step": 1, "response_length": 5 + 30 * k + g,
                         "status": "dropped" if g % 4 == 0 else "trained"})
    (run / "samples.jsonl").write_text("\n".join(json.dumps(r) for r in recs) + "\n")
    return run


def test_lengths_from_run_keeps_groups_and_reads_settings(tmp_path):
    dist = lengths_from_run(write_run(tmp_path))
    assert dist.kind == "empirical" and len(dist.groups) == 12 and dist.groups[0] == [5, 35, 65, 95]
    x = dist.sample_groups(50, 4, np.random.default_rng(0))
    assert all(list(row) in dist.groups for row in x.tolist())  # whole groups, never mixed


def test_lengths_from_metrics_only(tmp_path):
    run = tmp_path / "m"
    run.mkdir()
    (run / "metrics.jsonl").write_text("\n".join(json.dumps({"response_length/mean": 20.0, "response_length/max": 120.0,
                                                            "actor/response_tokens": 1280.0}) for _ in range(3)))
    d = lengths_from_run(run)
    assert d.kind == "lognormal" and d.params["sigma"] > 0.5
    assert np.mean(d.sample_groups(4000, 8, np.random.default_rng(0))) == pytest.approx(20.0, rel=0.1)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(LengthSpecError, match="no finished samples"):
        lengths_from_run(empty)


@pytest.mark.parametrize("engine,paged,noted", [("torch", False, True), ("torch", True, False), ("vllm", False, True),
                                                 ("hf", False, False), ("hf", True, True), (None, False, False)])
def test_a_cost_model_for_another_engine_layout_is_noted(tmp_path, capsys, engine, paged, noted):
    """A cost file prices a padded engine (the HF engine's, `padded: true`); planning a torch (paged) run with it
    counts padding the run never computed: one note on stderr, the plan still printed."""
    run = write_run(tmp_path)
    if engine is not None:
        text = (run / "config.yaml").read_text()
        (run / "config.yaml").write_text(text.replace("rollout:\n", f"rollout:\n  engine: {engine}\n"))
    cost = tmp_path / "cost.json"
    CostModel(decode_fixed=0.008, prefill_token=7e-5, update_fixed=0.5, padded=True).save(cost)
    argv = ["plan", "--lengths-from", str(run), "--cost", str(cost), "--segments", "1,2", "--steps", "2",
            "--warmup", "1", *(["--paged"] if paged else [])]
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert "recommended: M=" in captured.out
    notes = [ln for ln in captured.err.splitlines() if ln.startswith("ulorl plan: note:")]
    if not noted:
        assert notes == []
    elif paged:
        assert notes == [f"ulorl plan: note: the cost model prices a paged (no padding) engine, but {run} ran "
                         f"rollout.engine=hf; a cost file measured on the HF engine prices its padding (and without "
                         f"--paged)"]
    else:
        assert notes == [f"ulorl plan: note: the cost model prices a padded (every row of a call padded to its longest "
                         f"prefix) engine, but {run} ran rollout.engine={engine}; --calibrate measures this machine's "
                         f"torch engine; --paged prices these costs without padding"]


def test_cli_plans_from_a_run_folder(tmp_path, capsys):
    run = write_run(tmp_path)
    cost = tmp_path / "cost.json"
    CostModel(decode_fixed=0.008, decode_row=1e-4, prefill_token=7e-5, update_fixed=0.5).save(cost)
    assert main(["plan", "--lengths-from", str(run), "--cost", str(cost), "--segments", "1,2,4", "--steps", "4",
                 "--warmup", "2"]) == 0
    out = capsys.readouterr().out
    assert "L=160  G=4  decode batch=32  train groups=4" in out and "drop rate=0.25" in out
    table = [ln for ln in out.splitlines() if ln.strip().startswith(("1 ", "2 ", "4 "))]
    assert "recommended: M=" in out and len(table) == 3
    assert main(["plan", "--lengths", "lognormal:median=30,sigma=0.8", "--max-len", "160", "--segments", "1,2",
                 "--fit-table", "1=2.0,2=1.5", "--steps", "4", "--warmup", "2", "--json",
                 "--save-cost", str(tmp_path / "fit.json")]) == 0
    res = json.loads(capsys.readouterr().out)
    assert [r["step_s"] for r in res["rows"]] == pytest.approx([2.0, 1.5], rel=1e-6)
    assert CostModel.load(tmp_path / "fit.json").decode_fixed > 0


def test_a_fit_that_misses_its_table_and_lengths_cut_by_the_run_are_noted(tmp_path, capsys):
    """Two notes on stderr: a cost model fitted to `--fit-table` that cannot reproduce it (its rows were 12 s for
    a table of 10 s and 20 s, silently), and a run's answers cut at its own L planned at a larger --max-len."""
    lengths = ["--lengths", "lognormal:median=100,sigma=0.8", "--max-len", "1024", "--steps", "5", "--warmup", "2",
               "--segments", "1,2"]
    assert main(["plan", *lengths, "--fit-table", "1=10,2=20"]) == 0
    assert "ulorl plan: note: the fitted cost model does not reproduce --fit-table (M=1: " in capsys.readouterr().err
    assert main(["plan", *lengths, "--fit-table", "1=10,2=9"]) == 0  # one it can reproduce: no note
    assert "note" not in capsys.readouterr().err
    run = write_run(tmp_path)
    with open(run / "samples.jsonl", "a") as f:  # 2 groups of 4 cut at the run's L = 160: 8 of 56 answers
        for g in range(12, 14):
            f.write("".join(json.dumps({"sample_id": f"g{g}/{k}", "group_id": f"g{g}", "step": 1, "status": "trained",
                                        "response_length": 160}) + "\n" for k in range(4)))
    cost = tmp_path / "cost.json"
    CostModel(decode_fixed=0.008, decode_row=1e-4, prefill_token=7e-5, update_fixed=0.5).save(cost)
    args = ["plan", "--lengths-from", str(run), "--cost", str(cost), "--segments", "1,2", "--steps", "4",
            "--warmup", "2"]
    assert main([*args, "--max-len", "640"]) == 0
    assert (f"ulorl plan: note: {run} ran with rollout.max_response_len=160, and 14% of its answers were cut there: "
            "planned for --max-len 640, they still end at 160") in capsys.readouterr().err
    assert main(args) == 0  # at the run's own L: nothing to say
    assert "note" not in capsys.readouterr().err


def test_cli_pipeline_both_and_overlap(tmp_path, capsys):
    # every answer 40 tokens (L=160, G=8, 64 rows, 8 groups): 40 decode iterations per step at every M.
    # decode 0.1 s -> generation 4.0 s; update 3.0 s; --sync-s 0.5: sync 4 + 3 + 0.5 = 7.5 s, overlap
    # max(4, 3) + 0.5 = 4.5 s (1.67x), bound (4 + 3) / 4 = 1.75x
    cost = tmp_path / "cost.json"
    CostModel(decode_fixed=0.1, update_fixed=3.0).save(cost)
    base = ["plan", "--lengths", "fixed:length=40", "--max-len", "160", "--segments", "1,2", "--cost", str(cost),
            "--sync-s", "0.5", "--steps", "3", "--warmup", "2"]
    assert main([*base, "--pipeline", "both", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    by = res["by_pipeline"]
    assert [r["step_s"] for r in by["sync"]["rows"]] == pytest.approx([7.5, 7.5])
    assert [r["step_s"] for r in by["overlap"]["rows"]] == pytest.approx([4.5, 4.5])
    assert [r["overlap_bound"] for r in by["overlap"]["rows"]] == pytest.approx([1.75, 1.75])
    assert by["sync"]["recommended"] == by["overlap"]["recommended"] == 1 and res["cost"]["sync_fixed"] == 0.5
    assert main([*base, "--pipeline", "both"]) == 0
    out = capsys.readouterr().out
    row = next(ln.split() for ln in out.splitlines() if ln.strip().startswith("1 "))
    assert row[1:5] == ["7.5", "4.5", "1.67x", "1.75x"] and "recommended: sync M=1, overlap M=1" in out
    assert main([*base, "--pipeline", "overlap"]) == 0
    out = capsys.readouterr().out
    assert "pipeline=overlap" in out and "M=1 1.75x" in out
    assert next(ln.split() for ln in out.splitlines() if ln.strip().startswith("2 "))[1] == "4.5"
    with pytest.raises(SystemExit):  # argparse: invalid choice
        main([*base, "--pipeline", "async"])
    assert "invalid choice" in capsys.readouterr().err


@pytest.mark.parametrize("argv, field", [
    (["--lengths", "lognormal:median=10", "--max-len", "160"], "sigma"),
    (["--lengths", "lognormal:median=-1,sigma=1", "--max-len", "160"], "median"),
    (["--lengths", "weibull:k=1", "--max-len", "160"], "weibull"),
    (["--lengths", "pareto:alpha=1.1,min=4,mx=9", "--max-len", "160"], "mx"),
    (["--lengths", "geometric:mean=0.5", "--max-len", "160"], "mean"),
    (["--lengths", "fixed:length=10"], "--max-len"),
    (["--lengths", "fixed:length=10", "--max-len", "160", "--segments", "1,3"], "--segments"),
    (["--lengths", "fixed:length=10", "--max-len", "160", "--fit-table", "1=abc"], "--fit-table"),
    (["--lengths", "fixed:length=10", "--max-len", "160", "--fit-table", "1=2", "--fit-free", "speed"], "speed"),
    (["--lengths", "fixed:length=10", "--max-len", "160", "--prompt-len", "0", "--fit-table", "1=2"], "prompt-len"),
    (["--lengths", "fixed:length=10", "--max-len", "160"], "--cost"),
    (["--lengths", "fixed:length=10", "--max-len", "160", "--fit-table", "1=2", "--sync-s", "-1"], "--sync-s"),
    # each was a traceback: no M within a negative tolerance (min() of nothing), numpy's refusal of a negative seed
    (["--lengths", "fixed:length=10", "--max-len", "160", "--fit-table", "1=2", "--tolerance", "-1"],
     "--tolerance=-1.0 must be a share >= 0"),
    (["--lengths", "fixed:length=10", "--max-len", "160", "--fit-table", "1=2", "--tolerance", "nan"],
     "--tolerance=nan must be a share >= 0"),
    (["--lengths", "fixed:length=10", "--max-len", "160", "--fit-table", "1=2", "--seed", "-1"],
     "--seed: seed=-1 must be >= 0"),
    (["--lengths-from", "/nonexistent-run"], "--lengths-from /nonexistent-run: no such folder (give the folder of"),
])
def test_cli_bad_input_names_the_field(argv, field, capsys):
    assert main(["plan", *argv, "--steps", "2", "--warmup", "1"]) == 2
    assert field in capsys.readouterr().err


def test_cli_without_a_lengths_source_says_what_to_give_in_one_line(capsys):
    # it was argparse's usage (15 lines) and "one of the arguments ... is required"
    assert main(["plan"]) == 2
    err = capsys.readouterr().err
    assert err == ("ulorl plan: error: give where the answer lengths come from: --lengths-from RUN_DIR (a run's "
                   "samples) or --lengths SPEC (a distribution); or --memory for memory instead of time. "
                   "`ulorl plan --help` ends with examples\n")
    with pytest.raises(SystemExit):  # two sources are still argparse's error
        main(["plan", "--lengths", "fixed:length=10", "--memory"])
    assert "not allowed with argument" in capsys.readouterr().err


def test_cost_file_errors_name_the_field(tmp_path):
    p = tmp_path / "c.json"
    p.write_text(json.dumps({"decode_fixed": 0.1, "decode_speed": 2}))
    with pytest.raises(CostError, match="decode_speed"):
        CostModel.load(p)
    p.write_text(json.dumps({"update_fixed": -1}))
    with pytest.raises(CostError, match="update_fixed"):
        CostModel.load(p)


def test_calibration_measures_the_engine(tiny_model_dir):
    from ulorl.models import load_model, load_tokenizer
    from ulorl.plan.calibrate import fit_engine, measure_engine

    tok, model = load_tokenizer(tiny_model_dir), load_model(tiny_model_dir)
    for engine, padded in (("torch", False), ("hf", True)):
        rows = measure_engine(model, tok.pad_token_id, batches=(1, 4), contexts=(8, 16), new_tokens=3, repeats=1,
                              engine=engine)
        assert len(rows) == 4 and all(r["prefill_s"] > 0 and r["iter_s"] >= 0 for r in rows)
        # b = 4 prefixes of c = 16 spread over [c/2, c]: c - (r * 8) // 3 for r = 0..3 = 16, 14, 11, 8 -> 49 tokens
        assert rows[-1]["prefill_tokens"] == 49 and rows[-1]["prefill_sq"] == 16**2 + 14**2 + 11**2 + 8**2
        cost = fit_engine(rows)
        # timing noise decides how the time splits over fixed, per-row and per-context costs (any may fit to 0);
        # what holds on any machine: positive times fit to a positive predicted iteration
        r = rows[-1]
        iteration = cost.time({"iterations": 1, "row_iters": r["batch"], "ctx_sum": r["batch"] * r["context"]})
        assert iteration > 0 and cost.padded == padded


def test_fit_engine_recovers_planted_decode_and_prefill_costs():
    from ulorl.plan.calibrate import fit_engine

    true = CostModel(round_fixed=0.004, prefill_token=3e-5, prefill_sq=2e-8, decode_fixed=0.002, decode_row=1e-4,
                     decode_ctx=5e-7)
    n, rows = 4, []
    for b in (1, 4, 16):
        for c in (64, 256, 1024):
            tokens, sq = b * c - b, b * c * c // 2  # packed prefixes shorter than c (torch engine)
            rows.append({"engine": "torch", "new_tokens": n, "batch": b, "context": c, "prefill_tokens": tokens,
                         "prefill_sq": sq,
                         "iter_s": true.time({"iterations": 1, "row_iters": b, "ctx_sum": b * (c + n / 2)}),
                         "prefill_s": true.time({"rounds": 1, "prefill_tokens": tokens, "prefill_sq": sq})})
    got = fit_engine(rows)
    assert got.padded is False
    for f in ("round_fixed", "prefill_token", "prefill_sq", "decode_fixed", "decode_row", "decode_ctx"):
        assert getattr(got, f) == pytest.approx(getattr(true, f), rel=1e-6), f
    # the hf engine pads every row to the call's context: its prefill is fitted on b * c and b * c**2
    hf = [{**r, "engine": "hf", "prefill_s": true.time({"rounds": 1, "prefill_tokens": r["batch"] * r["context"],
                                                        "prefill_sq": r["batch"] * r["context"] ** 2})}
          for r in rows]
    got = fit_engine(hf)
    assert got.padded is True and got.prefill_sq == pytest.approx(true.prefill_sq, rel=1e-6)


COST_UNDER_A_FULL_DISK = """
import resource, signal, sys
from ulorl.plan import CostModel
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG, like ENOSPC
resource.setrlimit(resource.RLIMIT_FSIZE, (64, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
try:
    CostModel(decode_fixed=0.5).save(sys.argv[1])
except OSError as e:
    print("could not write:", e)
"""


def test_a_full_disk_while_saving_a_cost_model_keeps_the_one_it_replaces(tmp_path):
    # `ulorl plan --cost F --save-cost F` refits F in place: a torn F would lose the fit it started from
    cost = tmp_path / "cost.json"
    CostModel(decode_fixed=0.008, update_fixed=0.5).save(cost)
    before = cost.read_bytes()
    out = subprocess.run([sys.executable, "-c", COST_UNDER_A_FULL_DISK, str(cost)], capture_output=True, text=True,
                         timeout=900, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert out.returncode == 0, out.stderr
    assert "could not write" in out.stdout
    assert cost.read_bytes() == before and CostModel.load(cost).decode_fixed == 0.008
    assert [p.name for p in tmp_path.iterdir()] == ["cost.json"]  # no temp file left


def test_a_cost_file_that_cannot_be_written_is_named_as_given(tmp_path, capsys):
    # the file is written beside its place under a temporary name: the error names the place, not that name
    fit = ["plan", "--lengths", "fixed:length=10", "--max-len", "40", "--segments", "1,2", "--fit-table",
           "1=2.0,2=1.5", "--steps", "2", "--warmup", "1", "--save-cost"]
    for target, why in [(tmp_path, "Is a directory"), (tmp_path / "missing" / "cost.json", "No such file")]:
        capsys.readouterr()
        assert main([*fit, str(target)]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith(f"ulorl plan: error: {target}: {why}") and ".tmp-" not in err, err
    assert [p.name for p in tmp_path.iterdir()] == []


@pytest.mark.parametrize("text,words", [("rollout: [1\n", "config.yaml is not valid YAML: line 2, column 1"),
                                        ("- 1\n", "config.yaml: expected a run's config (a mapping of sections)")])
def test_a_run_whose_config_does_not_read_is_one_line(tmp_path, capsys, text, words):
    run = write_run(tmp_path)
    (run / "config.yaml").write_text(text)  # a traceback from yaml.safe_load, or from .get on a list
    assert main(["plan", "--lengths-from", str(run), "--fit-table", "1=2", "--steps", "2", "--warmup", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("ulorl plan: error: ") and words in err[0], err


def test_options_of_the_other_mode_are_named_as_ignored_and_two_cost_models_refused(capsys):
    """`--memory` ignored --cost, --segments and --max-len, and time planning ignored --checkpointing, silently;
    `--cost FILE --calibrate` dropped the file and calibrated."""
    assert main(["plan", "--memory", "--model", "builtin", "--lengths-k", "1", "--cost", "x.json", "--segments",
                 "1,2", "--max-len", "9"]) == 0
    assert "ulorl plan: note: ignored with --memory (they plan step times): --max-len, --segments, --cost" in \
        capsys.readouterr().err
    assert main(["plan", "--lengths", "fixed:length=64", "--max-len", "128", "--fit-table", "1=1,2=2", "--segments",
                 "1,2", "--checkpointing", "--steps", "3", "--warmup", "1"]) == 0
    assert "ulorl plan: note: ignored without --memory (they plan memory): --checkpointing" in capsys.readouterr().err
    assert main(["plan", "--lengths", "fixed:length=64", "--max-len", "128", "--cost", "x.json", "--calibrate"]) == 2
    assert "--cost and --calibrate are two cost models: give one" in capsys.readouterr().err
    assert main(["plan", "--memory", "--model", "builtin", "--lengths-k", "1"]) == 0  # defaults only: no note
    assert "note" not in capsys.readouterr().err


def test_lengths_from_an_sft_run_names_the_folder_kind(tmp_path):
    (tmp_path / "sft" / "model").mkdir(parents=True)
    (tmp_path / "sft" / "model" / "config.json").write_text("{}")
    (tmp_path / "sft" / "sft_report.json").write_text("{}")
    (tmp_path / "sft" / "metrics.jsonl").write_text('{"step": 1, "sft/loss": 1.0}\n')
    with pytest.raises(LengthSpecError, match=r"a `ulorl sft` run, which samples no answers to plan from"):
        lengths_from_run(tmp_path / "sft")
