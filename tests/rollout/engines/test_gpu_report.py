"""`benchmarks/gpu_report.py`: the reading of a GPU check's JSON. A loan is minutes long, so the verdicts on issue 26's
targets and the decode cost fit are computed the same way every time: tested here on figures made from a known cost
(the fit gives that cost back), on the closed form against its definition, and on the first H200 run's file
(partial: every target it did not reach reads "not measured")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.rollout.engines.benchmark_modules import benchmark_module

ROOT = Path(__file__).resolve().parents[3]
BW, WB, BPT = 4e12, 988_065_536.0, 12288.0  # bytes/s; the 0.5B shape's weight bytes and K/V bytes a token
# the cost the figures are made from: 0.5 ms a step above the weights' floor, 2 us a row, K/V read at half speed
FIXED, ROW, CTX = WB / BW + 0.5e-3, 2e-6, 2 * BPT / BW


def made_run(over_256: float | None = None) -> dict:
    """A gpu_paged_check.json whose decode table and rollouts cost exactly FIXED, ROW and CTX (with `over_256`, its
    256-row decode points at that multiple of their floors instead)."""
    decode = []
    for rows in (64, 256):
        for ctx in (2048, 8192, 32768):
            kv = rows * ctx * BPT
            ms = 1000 * (FIXED + ROW * rows + CTX * rows * ctx)
            floor = 1000 * (WB + kv) / BW
            decode.append({"rows": rows, "context": ctx, "ms_per_iteration": ms, "kv_bytes_read": kv,
                           "floor_ms": floor, "over_floor": ms / floor})
    for r in decode[3:] if over_256 is not None else []:
        r["ms_per_iteration"], r["over_floor"] = over_256 * r["floor_ms"], over_256

    def seg(m: int, iterations: int, rows: int, ctx: float, samples: int, rest_s: float) -> dict:
        decode_s = FIXED * iterations + ROW * rows + CTX * ctx
        floor_s = (iterations * WB + ctx * BPT) / BW
        seconds = decode_s + rest_s
        return {"M": m, "samples": samples, "seconds": seconds, "samples_per_s": samples / seconds,
                "decoded_tokens_per_s": rows / seconds, "decode_iterations": iterations, "row_iterations": rows,
                "context_tokens": ctx, "decode_floor_s": floor_s, "over_floor": seconds / floor_s, "preemptions": 0}

    one, four = seg(1, 12000, 480_000, 1.1e9, 256, 1.0), seg(4, 5000, 500_000, 1.2e9, 260, 3.0)
    return {"device": "made", "torch": "-", "quick": False, "skipped": [], "bandwidth": {"bytes_per_s": BW},
            "bytes": {"weights": WB, "kv_per_token": BPT}, "decode": decode,
            "segment_rollout": {"1": one, "4": four, "speedup_M4": four["samples_per_s"] / one["samples_per_s"],
                                "floor_speedup_M4": (260 / four["decode_floor_s"]) / (256 / one["decode_floor_s"])},
            "slots_vs_paged": {"rows": 128, "cap": 16384, "slot_rows_of_pool": 25, "pool_gib": 43.9,
                               "slots_needed_gib": 224.9, "peak_kv_gib": 9.6, "live_tokens_at_peak": 86450,
                               "preemptions": 0}}


def test_the_fit_gives_back_the_cost_the_figures_were_made_from():
    report = benchmark_module("gpu_report")
    fit = report.decode_fit(made_run())
    assert fit["cost"]["decode_fixed"] == pytest.approx(FIXED, rel=1e-9)
    assert fit["cost"]["decode_row"] == pytest.approx(ROW, rel=1e-9)
    assert fit["cost"]["decode_ctx"] == pytest.approx(CTX, rel=1e-9)
    assert fit["floor"] == {"decode_fixed": WB / BW, "decode_row": 0.0, "decode_ctx": BPT / BW}
    assert all(r["fitted_ms"] == pytest.approx(r["ms"], rel=1e-9) for r in fit["residuals"])
    seg = fit["segments"]["segment_rollout"]
    # each rollout's decode priced from its counts; what is left is the rest made into its seconds (1 s and 3 s)
    assert seg["1"]["rest_s"] == pytest.approx(1.0, abs=1e-6) and seg["4"]["rest_s"] == pytest.approx(3.0, abs=1e-6)
    d1, d4 = (FIXED * i + ROW * r + CTX * c for i, r, c in ((12000, 480_000, 1.1e9), (5000, 500_000, 1.2e9)))
    assert seg["4"]["decode_speedup"] == pytest.approx((260 / d4) / (256 / d1), rel=1e-9)
    assert seg["iteration_bound"] == pytest.approx((260 / 5000) / (256 / 12000))


def test_the_fixed_cost_for_the_target_by_hand_and_by_its_definition():
    report = benchmark_module("gpu_report")
    # r = 1; 1 x 10 < 1.6 x 9, so f = (1.6 x 9 - 10) / (12000 - 1.6 x 5000) = 4.4 / 4000 s
    f = report.fixed_for_target(10.0, 12000, 256, 9.0, 5000, 256)
    assert f == pytest.approx(1.1e-3)
    assert (256 / (9.0 + 5000 * f)) / (256 / (10.0 + 12000 * f)) == pytest.approx(1.6)
    for t1, i1, s1, t4, i4, s4 in ((7.0, 9000, 256, 6.5, 3000, 270), (30.0, 12000, 256, 25.0, 4000, 250)):
        f = report.fixed_for_target(t1, i1, s1, t4, i4, s4)
        assert f > 0 and (s4 / (t4 + i4 * f)) / (s1 / (t1 + i1 * f)) == pytest.approx(1.6)
    assert report.fixed_for_target(10.0, 12000, 256, 5.0, 5000, 256) == 0.0  # 2x already
    # as f grows the ratio tends to (256 / 9000) / (256 / 12000) = 1.33 < 1.6: no f reaches it
    assert report.fixed_for_target(10.0, 12000, 256, 9.0, 9000, 256) is None


@pytest.mark.parametrize("over, met", [(1.9, True), (2.1, False)])
def test_the_targets_read_met_or_not(over, met):
    report = benchmark_module("gpu_report")
    run = made_run(over_256=over)
    decode, segment, slots = report.targets(run)
    assert decode[2] is met
    assert f"2k: {run['decode'][3]['ms_per_iteration']:.2f} ms" in decode[1] and "32k: " in decode[1]
    assert decode[1].count(f"({over:.2f}x)") == 3
    run["decode"][5]["over_floor"] = 2.5  # one context over the target: not met
    assert report.targets(run)[0][2] is False
    del run["decode"][5]  # a context not run is named, and the others decide
    run["skipped"] = ["decode 256 x 32768: KV over 80% of free memory"]
    decode = report.targets(run)[0]
    assert decode[2] is met and "32768 not run (KV over 80% of free memory)" in decode[1]
    assert segment[2] is (run["segment_rollout"]["speedup_M4"] >= 1.6)
    assert slots[2] is True and "0 preemptions" in slots[1]
    run["slots_vs_paged"]["preemptions"] = 3
    assert report.targets(run)[2][2] is False
    text = report.report("made", made_run())
    assert "### Issue 26's targets" in text and "Per iteration 0.747 ms" in text


def test_the_first_h200_runs_read_not_measured_where_they_stopped(tmp_path, capsys):
    report = benchmark_module("gpu_report")
    path = ROOT / "docs" / "gpu_check_h200_2026-12-04.json"
    runs = report.load_runs(path)
    assert list(runs) == ["run_1", "run_2"]
    for p in runs.values():  # M = 1 ran, M = 4, the decode table and the slots did not
        assert [ok for _, _, ok in report.targets(p)] == [None, None, None]
        assert report.decode_fit(p) is None
    assert report.main([str(path), "--out", str(tmp_path / "r.md")]) == 0
    out = (tmp_path / "r.md").read_text()
    assert out.strip() and out.strip() in capsys.readouterr().out  # printed, and written
    assert "| 1 | 2.572 |" in out and "| flex+graphs | 17.70 | 2.63x |" in out
    # run_1's side-by-side, named as the check names its paths now; the block size from the paths
    assert "| flex+graphs | 17.73 | 2.73x |" in out and "| flex | 21.85 | 3.36x |" in out
    assert "| gather+graphs | 146.96 |" in out and "| split_k | 98.09 |" in out
    assert out.count("decode path flex (blocks of 64)") == 2


def test_bad_input_names_the_file(tmp_path, capsys):
    report = benchmark_module("gpu_report")
    assert report.main([str(tmp_path / "missing.json")]) == 2
    assert "missing.json: no such file" in capsys.readouterr().err
    (tmp_path / "other.json").write_text(json.dumps({"steps": 3}))
    assert report.main([str(tmp_path / "other.json")]) == 2
    assert "other.json: no 'paged_engine' figures" in capsys.readouterr().err
    (tmp_path / "broken.json").write_text("{")
    assert report.main([str(tmp_path / "broken.json")]) == 2
    assert "broken.json: not JSON" in capsys.readouterr().err


def test_a_run_the_timeout_ended_says_where_and_where_the_time_went():
    report = benchmark_module("gpu_report")
    run = made_run()
    run["part_s"] = {"bandwidth": 0.5, "decode_paths": 61.31, "segment_rollout M=1": 80.0}
    text = report.report("made", run)
    assert "Seconds per part: bandwidth 0.5, decode_paths 61.3, segment_rollout M=1 80.0." in text
    assert "Ended during" not in text
    run["part_running"] = {"name": "segment_rollout M=4", "at_s": 142.4}
    text = report.report("made", run)
    assert "Ended during `segment_rollout M=4`, started 142 s into the check (the timeout)" in text
