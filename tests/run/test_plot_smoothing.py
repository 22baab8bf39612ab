"""`ulorl plot` draws a smoothed curve (bias-corrected EMA, as TensorBoard) over the faded raw series."""

from __future__ import annotations

import argparse
import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from ulorl.run.plot import DEFAULT_SMOOTH, PANELS, Curve, add_plot_arguments, draw_panel, ema, isolated  # noqa: E402


def test_ema_by_hand():
    # w = 0.6: acc1 = 0.4*1 = 0.4 -> 0.4/(1-0.6) = 1; acc2 = 0.6*0.4 + 0.4*3 = 1.44 -> 1.44/(1-0.36) = 2.25;
    # acc3 = 0.6*1.44 + 0.4*5 = 2.864 -> 2.864/(1-0.216) = 3.65306...
    assert ema([1.0, 3.0, 5.0], 0.6) == pytest.approx([1.0, 2.25, 2.864 / 0.784])
    # a NaN is a gap: the next value continues from the last finite ones (n counts finite values only)
    out = ema([1.0, math.nan, 3.0], 0.6)
    assert out[0] == pytest.approx(1.0) and math.isnan(out[1]) and out[2] == pytest.approx(2.25)
    assert ema([7.0, 7.0, 7.0], 0.9) == pytest.approx([7.0, 7.0, 7.0])  # bias-corrected: a constant stays put


def test_the_cli_smooths_by_default():
    args = add_plot_arguments(argparse.ArgumentParser()).parse_args(["run"])
    assert args.smooth == DEFAULT_SMOOTH == 0.6


def test_a_dense_curve_is_drawn_faded_raw_then_smoothed():
    fig, ax = plt.subplots()
    values = [1.0, 3.0, 5.0, 2.0]
    curve = Curve(run=0, metric="actor/entropy", label="entropy", sparse=False, steps=[1, 2, 3, 4], values=values)
    draw_panel(ax, PANELS[0], [curve], ["run"], DEFAULT_SMOOTH)
    raw, smooth = ax.get_lines()
    assert list(raw.get_ydata()) == values and raw.get_alpha() == 0.25 and raw.get_label().startswith("_")
    assert list(smooth.get_ydata()) == pytest.approx(ema(values, 0.6)) and smooth.get_label() == "entropy"
    assert raw.get_color() == smooth.get_color() and smooth.get_marker() == "None"  # no lone point: no marker
    plt.close(fig)


def test_a_value_with_no_finite_neighbour_gets_a_marker_and_steps_tick_as_whole_numbers():
    # a line draws nothing at a lone point: a segment age seen at one step only was an empty panel
    assert isolated([1.0]) == [0] and isolated([1.0, 2.0]) == []
    assert isolated([1.0, math.nan, 3.0, 4.0, math.nan, 6.0]) == [0, 5]
    fig, ax = plt.subplots()
    lone = Curve(run=0, metric="actor/pois_bias/age_1", label="age 1", sparse=False, steps=[2], values=[2e-7])
    draw_panel(ax, PANELS[0], [lone], ["run"], DEFAULT_SMOOTH)
    raw, smooth = ax.get_lines()
    assert smooth.get_marker() == "o" and list(smooth.get_markevery()) == [0]
    ax.set_xlim(1, 2)
    assert all(float(t).is_integer() for t in ax.get_xticks())
    plt.close(fig)
