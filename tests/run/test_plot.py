"""`ulorl plot`: PNG figures from runs' metrics.jsonl, and clear errors for bad run folders."""

from __future__ import annotations

import argparse
import json
import logging
import math
from pathlib import Path

import numpy as np
import pytest
from matplotlib.image import imread

from ulorl.run.plot import add_plot_arguments, ema, plot_panels, plot_runs, run_plot

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def write_run(run_dir: Path, segments: int, steps: int = 12, pois: bool = True) -> Path:
    run_dir.mkdir(parents=True)
    with open(run_dir / "metrics.jsonl", "w") as f:
        for s in range(1, steps + 1):
            row = {
                "step": s,
                "actor/entropy": 0.6 - 0.02 * s,
                "critic/score/mean": 0.2 + 0.04 * s,
                "response_length/mean": 100.0 + 10 * s * segments,
                "actor/dmmpt_mask_ratio": 0.01 * s,
                "rollout/unfinished_pool": 4.0 * (segments - 1),
                "rollout/experience_pool": float(s % 3),
                "rollout/segments_per_sample": 1.0 + 0.1 * (segments - 1) * s,
                "timing_s/step": 5.0 / segments + 0.1 * s,
            }
            if pois:
                for k in range(segments):
                    row[f"pois/abs_log_ratio_age{k}"] = 0.01 * (k + 1)
            if s == 6:
                row["actor/entropy"] = None  # a NaN written as null: a gap
            if s % 4 == 0:
                row["eval/avg@k"] = 0.1 * s / 4
            f.write(json.dumps(row) + "\n")
    return run_dir


def assert_real_png(path: Path) -> None:
    data = path.read_bytes()
    assert len(data) > 0 and data[:8] == PNG_MAGIC, path
    img = imread(path)  # (H, W, 4) floats
    assert img.ndim == 3 and np.any(img != img[0, 0]), f"{path} is blank (one colour)"


def test_plot_runs_writes_one_png_per_panel_and_an_overview(tmp_path):
    a = write_run(tmp_path / "pois_m4", segments=4)
    b = write_run(tmp_path / "tois_m1", segments=1, pois=False)
    paths, skipped = plot_panels([a, b], tmp_path / "plots", smooth=0.5)
    names = {p.name for p in paths}
    assert names == {"entropy.png", "reward.png", "response_length.png", "dmmpt_mask_ratio.png", "pools.png",
                     "segments_per_sample.png", "step_time.png", "pois_bias.png", "overview.png"}
    assert skipped == ["SFT loss"]
    for p in paths:
        assert p.parent == tmp_path / "plots"
        assert_real_png(p)


def test_panels_without_data_are_skipped_and_logged(tmp_path, caplog):
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text('{"step": 1, "actor/entropy": 0.5}\n{"step": 2, "actor/entropy": 0.4}\n')
    with caplog.at_level(logging.INFO, logger="ulorl.run.plot"):
        paths = plot_runs([run], tmp_path / "out", names=["mine"])
    assert [p.name for p in paths] == ["entropy.png", "overview.png"]
    assert "skipping panel 'POIS bias by segment age'" in caplog.text


def test_missing_metrics_file_names_the_run(tmp_path):
    run = tmp_path / "empty_run"
    run.mkdir()
    with pytest.raises(FileNotFoundError, match=r"run .*empty_run: no metrics.jsonl"):
        plot_runs([run], tmp_path / "out")


def test_unparsable_file_names_the_run_and_lines_are_warned(tmp_path, caplog):
    run = tmp_path / "broken"
    run.mkdir()
    (run / "metrics.jsonl").write_text("garbage\n{\"no_step\": 1}\n")
    with caplog.at_level(logging.WARNING), pytest.raises(ValueError, match=r"run .*broken: .* no parsable"):
        plot_runs([run], tmp_path / "out")
    assert "metrics.jsonl:1" in caplog.text and "metrics.jsonl:2" in caplog.text


def test_names_must_match_runs(tmp_path):
    a = write_run(tmp_path / "a", segments=2)
    with pytest.raises(ValueError, match="got 2 name"):
        plot_runs([a], tmp_path / "out", names=["x", "y"])


def test_ema_is_bias_corrected_and_skips_nan():
    # w = 0.5: acc1 = 0.5*2 = 1 -> 1/(1-0.5) = 2; acc2 = 0.5*1 + 0.5*4 = 2.5 -> 2.5/(1-0.25) = 3.333...
    out = ema([2.0, math.nan, 4.0], 0.5)
    assert out[0] == 2.0 and math.isnan(out[1]) and out[2] == pytest.approx(2.5 / 0.75)
    assert ema([1.0, 3.0], 0.0) == [1.0, 3.0]
    with pytest.raises(ValueError, match=r"smoothing weight must be in \[0, 1\)"):
        ema([1.0], 1.0)


def parse(argv: list[str]) -> argparse.Namespace:
    return add_plot_arguments(argparse.ArgumentParser()).parse_args(argv)


def test_cli_defaults_to_first_run_plots(tmp_path, capsys):
    a, b = tmp_path / "a", tmp_path / "b"
    for run, ent in ((a, 0.5), (b, 0.7)):
        run.mkdir()
        (run / "metrics.jsonl").write_text(
            "".join(json.dumps({"step": s, "actor/entropy": ent - 0.01 * s}) + "\n" for s in range(1, 6)))
    assert run_plot(parse([str(a), str(b), "--names", "POIS, TOIS", "--smooth", "0.6"])) == 0
    assert_real_png(a / "plots" / "overview.png")
    out = capsys.readouterr()
    assert out.out.split() == [str(a / "plots" / "entropy.png"), str(a / "plots" / "overview.png")]
    assert "skipped (no data in any run): Reward / accuracy" in out.err
    for flag in ("-o", "--output", "--out"):  # -o / --output as every other command names its output
        assert run_plot(parse([str(a), flag, str(tmp_path / flag)])) == 0
        assert_real_png(tmp_path / flag / "overview.png")
    # a run's metrics.jsonl given as the run: the plots go beside it (the default folder was under the file)
    assert run_plot(parse([str(b / "metrics.jsonl")])) == 0
    assert_real_png(b / "plots" / "overview.png")


def test_an_image_file_name_as_out_is_refused_before_any_folder(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text(json.dumps({"step": 1, "actor/entropy": 0.5}) + "\n")
    assert run_plot(parse([str(run), "-o", str(tmp_path / "fig.png")])) == 2
    err = capsys.readouterr().err
    assert err.startswith("ulorl plot: error: --out ") and f"give a folder, e.g. --out {tmp_path / 'fig'}" in err
    assert not (tmp_path / "fig.png").exists()  # no folder named fig.png
    (tmp_path / "old.png").mkdir()  # a folder that exists is a folder, whatever its name
    assert run_plot(parse([str(run), "-o", str(tmp_path / "old.png")])) == 0
    assert_real_png(tmp_path / "old.png" / "overview.png")


def test_cli_reports_missing_metrics_and_an_unusable_output_with_exit_code_2(tmp_path, capsys):
    from ulorl.cli import main

    (tmp_path / "nothing").mkdir()
    assert main(["plot", str(tmp_path / "nothing")]) == 2  # a user error: exit status 2, as every command
    err = capsys.readouterr().err
    assert err.startswith("ulorl plot: error: run ") and "nothing: no metrics.jsonl" in err
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text(json.dumps({"step": 1, "actor/entropy": 0.5}) + "\n")
    (tmp_path / "afile").write_text("kept")
    assert main(["plot", str(run), "-o", str(tmp_path / "afile")]) == 2
    err = capsys.readouterr().err  # one line naming the path and what is wrong with it, not "[Errno 17] ..."
    assert err == f"ulorl plot: error: {tmp_path / 'afile'}: File exists (it exists and is not a folder)\n"
    assert (tmp_path / "afile").read_text() == "kept"


def test_a_train_runs_warm_start_gives_the_sft_panel_and_its_phase_label_no_warning(tmp_path, caplog):
    from ulorl.run.plot import load_run, panel_curves, PANELS

    run = write_run(tmp_path / "long", segments=8, steps=4)
    (run / "warm_start").mkdir()
    (run / "warm_start" / "metrics.jsonl").write_text("".join(
        json.dumps({"step": s, "sft/loss": 6.0 / s, "sft/phase": "short" if s < 3 else "full",
                    "timing_s/elapsed": 0.1 * s}) + "\n" for s in range(1, 6)))
    with caplog.at_level(logging.WARNING, logger="ulorl.run.plot"):
        loaded = load_run(run)
        paths, skipped = plot_panels([run], tmp_path / "plots", smooth=0.0)
    assert "not numbers" not in caplog.text  # sft/phase is text in every row: a label
    (sft,) = panel_curves(next(p for p in PANELS if p.slug == "sft_loss"), [loaded])
    assert sft.steps == [1, 2, 3, 4, 5] and sft.values == [6.0, 3.0, 2.0, 1.5, 1.2]
    steps = next(c for c in panel_curves(PANELS[0], [loaded]))  # entropy: the RL steps only
    assert steps.steps == [1, 2, 3, 4]
    assert "sft_loss.png" in {p.name for p in paths} and skipped == []


def test_a_metric_that_is_text_in_some_rows_only_is_warned(tmp_path, caplog):
    from ulorl.run.plot import load_run

    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text('{"step": 1, "actor/entropy": 0.5}\n{"step": 2, "actor/entropy": "high"}\n')
    with caplog.at_level(logging.WARNING, logger="ulorl.run.plot"):
        load_run(run)
    assert "1 metric value(s) are not numbers" in caplog.text and "'actor/entropy'" in caplog.text
