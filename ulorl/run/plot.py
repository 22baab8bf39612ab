"""``ulorl plot``: figures comparing runs, read from each run's ``metrics.jsonl``.

One PNG per panel (``entropy.png``, ``reward.png``, ...) plus ``overview.png``
with every panel in a grid. Runs are overlaid: with one run each metric has
its own colour; with several runs colour = run and line style = metric.
Panels with no data in any run are skipped (and reported). Optional EMA
smoothing (``--smooth w``, TensorBoard-style, bias-corrected: ``s_t = w s_{t-1}
+ (1 - w) x_t``) draws the raw curve faintly under the smoothed one; sparse
series (evaluation) are drawn as markers and never smoothed. ``null`` values
(NaN/inf in training) leave gaps.

Drawn with ``matplotlib.figure.Figure`` (no pyplot, no global backend state),
so it is safe to call from a training process.
"""

from __future__ import annotations

import argparse
import logging
import math
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from ulorl.logging.jsonl import METRICS_FILE, read_metrics

log = logging.getLogger(__name__)

LINESTYLES = ("-", "--", ":", "-.")


@dataclass(frozen=True)
class Series:
    """Metrics of a panel: ``pattern`` is a regex matched against whole metric names."""

    pattern: str
    label: str  # may use the regex groups: "age {0}"
    sparse: bool = False  # drawn as markers, never smoothed (evaluation)


@dataclass(frozen=True)
class Panel:
    """One figure: its file stem, title, y-axis label and series."""

    slug: str
    title: str
    ylabel: str
    series: tuple[Series, ...]


PANELS: tuple[Panel, ...] = (
    Panel("entropy", "Policy entropy", "mean token entropy (nats)", (Series(r"actor/entropy", "entropy"),)),
    Panel("reward", "Reward / accuracy", "accuracy (mean reward)", (
        Series(r"critic/score/mean", "train score"),
        Series(r"eval/avg@(\w+)", "eval avg@{0}", sparse=True),
    )),
    Panel("response_length", "Response length", "tokens", (Series(r"response_length/mean", "mean length"),)),
    Panel("dmmpt_mask_ratio", "DMMPT mask ratio", "share of response tokens masked",
          (Series(r"actor/dmmpt_mask_ratio", "DMMPT mask ratio"),)),
    Panel("pools", "Pool sizes", "samples", (
        Series(r"rollout/unfinished_pool", "unfinished pool"),
        Series(r"rollout/experience_pool", "experience pool"),
    )),
    Panel("segments_per_sample", "Segments per trained sample", "segments",
          (Series(r"rollout/segments_per_sample", "segments / sample"),)),
    Panel("step_time", "Step time", "seconds", (Series(r"timing_s/step", "step time"),)),
    Panel("pois_bias", "POIS bias by segment age", r"mean $|\log\pi_\theta - \log\pi_{\mathrm{behaviour}}|$",
          (Series(r"pois/abs_log_ratio_age(\d+)", "age {0}"),)),
    Panel("sft_loss", "SFT loss", "cross-entropy loss", (Series(r"sft/loss", "SFT loss"),)),
)


@dataclass
class Run:
    """A run's name and its metrics rows (sorted by step; a train run's SFT rows after them, `load_run`)."""

    name: str
    rows: list[dict[str, Any]]


@dataclass
class Curve:
    """One line to draw: ``(steps, values)`` of one metric of one run."""

    run: int
    metric: str
    label: str
    sparse: bool
    steps: list[int]
    values: list[float]


# -- loading -------------------------------------------------------------------------------------
def load_run(run_dir: str | Path, name: str | None = None) -> Run:
    """Read ``run_dir/metrics.jsonl`` (or a ``.jsonl`` file given directly), and the ``sft/`` metrics of a train
    run's warm start (``run_dir/warm_start/metrics.jsonl``, steps of the SFT) when it has one. A metric whose
    values are all text (``sft/phase``) is a label, not plotted and not warned about.

    Raises:
        FileNotFoundError: no ``metrics.jsonl`` in ``run_dir``.
        ValueError: the file holds no parsable line.
    """
    path = Path(run_dir)
    if path.is_file():
        path, run_dir = path, path.parent
    else:
        path = path / METRICS_FILE
    if not path.is_file():
        raise FileNotFoundError(f"run {run_dir}: no {METRICS_FILE} (looked for {path}); is it a ulorl run directory?")
    rows = read_metrics(path)
    if not rows:
        raise ValueError(f"run {run_dir}: {path} has no parsable metrics line")
    sft = Path(run_dir) / "warm_start" / METRICS_FILE
    if path.name == METRICS_FILE and sft.is_file():  # a train run's SFT warm start: its rows for the SFT panel
        rows += [{"step": r["step"], **{k: v for k, v in r.items() if k.startswith("sft/")}} for r in read_metrics(sft)]
    labels = {k for row in rows for k, v in row.items() if isinstance(v, str)}  # e.g. sft/phase: text by design
    labels -= {k for row in rows for k, v in row.items() if v is not None and not isinstance(v, str)}
    odd = [(row["step"], k) for row in rows for k, v in row.items() if v is not None and k not in labels
           and (isinstance(v, bool) or not isinstance(v, (int, float)))]
    if odd:
        log.warning("%s: %d metric value(s) are not numbers and are left out of the plots (first: step %d, %r)",
                    path, len(odd), odd[0][0], odd[0][1])
    return Run(name or Path(run_dir).resolve().name, rows)


def default_names(run_dirs: Sequence[Path]) -> list[str]:
    """Folder names; when two runs share one, ``parent/name`` instead."""
    names = [Path(d).resolve().name if not Path(d).is_file() else Path(d).resolve().parent.name for d in run_dirs]
    if len(set(names)) == len(names):
        return names
    return ["/".join(Path(d).resolve().parts[-2:]) for d in run_dirs]


# -- data ----------------------------------------------------------------------------------------
def _number(v: Any) -> float:
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return float(v)
    return math.nan  # null (NaN/inf at training time) or junk: a gap


def _age_key(name: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", name))


def panel_curves(panel: Panel, runs: Sequence[Run]) -> list[Curve]:
    """Curves of ``panel`` with at least one finite value, in run then metric order."""
    curves: list[Curve] = []
    for r, run in enumerate(runs):
        keys = sorted({k for row in run.rows for k in row}, key=lambda k: (_age_key(k), k))
        for series in panel.series:
            rx = re.compile(series.pattern)
            for key in keys:
                m = rx.fullmatch(key)
                if m is None:
                    continue
                pts = [(row["step"], _number(row[key])) for row in run.rows if key in row]
                if not any(math.isfinite(v) for _, v in pts):
                    continue
                curves.append(Curve(r, key, series.label.format(*m.groups()), series.sparse,
                                    [s for s, _ in pts], [v for _, v in pts]))
    return curves


# `ulorl plot --smooth`'s default: TensorBoard's (per-step series of RL runs are too noisy to read raw)
DEFAULT_SMOOTH = 0.6


def ema(values: Sequence[float], weight: float) -> list[float]:
    """Bias-corrected exponential moving average; NaNs stay gaps and do not reset it."""
    if not 0.0 <= weight < 1.0:
        raise ValueError(f"smoothing weight must be in [0, 1), got {weight}")
    out, acc, n = [], 0.0, 0
    for v in values:
        if not math.isfinite(v):
            out.append(math.nan)
            continue
        acc, n = weight * acc + (1.0 - weight) * v, n + 1
        out.append(acc / (1.0 - weight**n))
    return out


# -- drawing -------------------------------------------------------------------------------------
def isolated(values: Sequence[float]) -> list[int]:
    """Indices of the finite values with no finite neighbour: a line draws nothing there, so they get a marker
    (a segment age seen at one step only, a run of one step, a value between two gaps)."""
    finite = [math.isfinite(v) for v in values]
    return [i for i, f in enumerate(finite)
            if f and not (i > 0 and finite[i - 1]) and not (i + 1 < len(finite) and finite[i + 1])]


def _colors() -> list[str]:
    return list(matplotlib.rcParams["axes.prop_cycle"].by_key()["color"])


def draw_panel(ax: Axes, panel: Panel, curves: Sequence[Curve], run_names: Sequence[str], smooth: float) -> None:
    """Draw ``curves`` on ``ax`` with title, axis labels and a legend."""
    colors = _colors()
    metrics = list(dict.fromkeys(c.metric for c in curves))
    several_runs = len({c.run for c in curves}) > 1  # colour by run only when runs overlap here
    for c in curves:
        mi = metrics.index(c.metric)
        color = colors[(c.run if several_runs else mi) % len(colors)]
        style = LINESTYLES[mi % len(LINESTYLES)] if several_runs else "-"
        if len(run_names) == 1:
            label = c.label
        elif len(metrics) == 1:
            label = run_names[c.run]
        else:
            label = f"{run_names[c.run]}: {c.label}"
        lone = isolated(c.values)
        alone = {"marker": "o", "markersize": 4, "markevery": lone} if lone else {}
        if c.sparse:
            ax.plot(c.steps, c.values, linestyle=style, marker="o", markersize=4, color=color, label=label)
        elif smooth > 0:
            ax.plot(c.steps, c.values, linestyle=style, color=color, alpha=0.25, linewidth=1)
            ax.plot(c.steps, ema(c.values, smooth), linestyle=style, color=color, linewidth=1.6, label=label,
                    **alone)
        else:
            ax.plot(c.steps, c.values, linestyle=style, color=color, linewidth=1.4, label=label, **alone)
    ax.set_title(panel.title)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole numbers
    ax.set_xlabel("training step")
    ax.set_ylabel(panel.ylabel)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")


def plot_panels(
    run_dirs: Sequence[str | Path], out_dir: str | Path, names: Sequence[str] | None = None, smooth: float = 0.0
) -> tuple[list[Path], list[str]]:
    """Like :func:`plot_runs`, also returning the titles of panels skipped for lack of data."""
    if not run_dirs:
        raise ValueError("plot needs at least one run directory")
    if names is not None and len(names) != len(run_dirs):
        raise ValueError(f"got {len(names)} name(s) for {len(run_dirs)} run(s): {list(names)}")
    ema([], smooth)  # validate early
    dirs = [Path(d) for d in run_dirs]
    run_names = list(names) if names is not None else default_names(dirs)
    runs = [load_run(d, n) for d, n in zip(dirs, run_names)]
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    drawn: list[tuple[Panel, list[Curve]]] = []
    skipped: list[str] = []
    for panel in PANELS:
        curves = panel_curves(panel, runs)
        if curves:
            drawn.append((panel, curves))
        else:
            skipped.append(panel.title)
            log.info("plot: skipping panel %r: no data in any run", panel.title)
    paths: list[Path] = []
    for panel, curves in drawn:
        fig = Figure(figsize=(7.0, 4.2), layout="constrained")
        draw_panel(fig.add_subplot(), panel, curves, run_names, smooth)
        paths.append(out / f"{panel.slug}.png")
        fig.savefig(paths[-1], dpi=120)
    if drawn:
        ncols = min(3, len(drawn))
        nrows = math.ceil(len(drawn) / ncols)
        fig = Figure(figsize=(5.5 * ncols, 3.6 * nrows), layout="constrained")
        axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
        for ax, (panel, curves) in zip(axes, drawn):
            draw_panel(ax, panel, curves, run_names, smooth)
        for ax in axes[len(drawn):]:
            ax.set_visible(False)
        fig.suptitle("ulorl runs: " + ", ".join(run_names))
        paths.append(out / "overview.png")
        fig.savefig(paths[-1], dpi=100)
    return paths, skipped


def plot_runs(
    run_dirs: list[Path], out_dir: Path, names: list[str] | None = None, smooth: float = 0.0
) -> list[Path]:
    """Write comparison figures of ``run_dirs`` into ``out_dir``; return the PNG paths.

    Args:
        run_dirs: run directories, each holding ``metrics.jsonl`` (a ``.jsonl`` path also works).
        out_dir: where the PNGs go (created if missing).
        names: legend names, one per run (default: each run's folder name).
        smooth: EMA weight in ``[0, 1)``; 0 = no smoothing.

    Raises:
        FileNotFoundError: a run has no ``metrics.jsonl`` (the message names the run).
        ValueError: a run's file has no parsable line, or ``names``/``smooth`` are invalid.
    """
    return plot_panels(run_dirs, out_dir, names, smooth)[0]


# -- command line --------------------------------------------------------------------------------
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".pdf", ".svg")


def add_plot_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add ``ulorl plot``'s arguments to ``parser``."""
    parser.add_argument("run_dirs", nargs="+", type=Path, metavar="RUN_DIR",
                        help="run directories (each with a metrics.jsonl) to overlay")
    parser.add_argument("--out", "--output", "-o", dest="out", type=Path, default=None,
                        help="output folder for the PNGs (default: FIRST_RUN_DIR/plots, beside a metrics.jsonl given)")
    parser.add_argument("--names", default=None,
                        help="comma-separated legend names, one per run (default: folder names)")
    parser.add_argument("--smooth", type=float, default=DEFAULT_SMOOTH,
                        help=f"EMA smoothing weight in [0, 1): a smoothed curve over the faded raw one, as "
                        f"TensorBoard draws (default: {DEFAULT_SMOOTH}; 0: the raw series only)")
    return parser


def run_plot(args: argparse.Namespace) -> int:
    """Run ``ulorl plot`` from parsed arguments; return the exit code (0 ok, 2 a user error, as every command)."""
    names = [n.strip() for n in args.names.split(",")] if args.names else None
    first = Path(args.run_dirs[0])  # a run folder, or a metrics.jsonl given as the run: its folder holds the plots
    out = args.out if args.out is not None else (first.parent if first.is_file() else first) / "plots"
    if out.suffix.lower() in IMAGE_SUFFIXES and not out.is_dir():  # a file name would become a folder of that name
        print(f"ulorl plot: error: --out {out}: a folder for the figures (one PNG a panel and an overview), not a "
              f"file name; give a folder, e.g. --out {out.with_suffix('')}", file=sys.stderr)
        return 2
    try:
        paths, skipped = plot_panels(args.run_dirs, out, names, args.smooth)
    except ValueError as e:  # an OSError goes to the CLI's handler, which names the path and the errno's meaning
        print(f"ulorl plot: error: {e}", file=sys.stderr)
        return 2
    for p in paths:
        print(p)
    if skipped:
        print(f"skipped (no data in any run): {', '.join(skipped)}", file=sys.stderr)
    print(f"wrote {len(paths)} figure(s) to {out}", file=sys.stderr)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m ulorl.run.plot RUN_DIR ...``: ``ulorl plot`` (its errors one line, as every command's)."""
    from ulorl.cli import main as cli

    return cli(["plot", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    raise SystemExit(main())
