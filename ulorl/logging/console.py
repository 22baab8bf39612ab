"""Console logger: a compact aligned table of key metrics, printed through ``tqdm.write``.

``tqdm.write`` prints above any active progress bar instead of breaking it.
A row is printed on the first logged step and then every ``table_every``
steps (``step % table_every == 0``); the column header is repeated every
``header_every`` rows and whenever a value outgrows its column. Missing metrics show as ``-``, non-finite ones as
``nan``/``inf``. Evaluation metrics (``eval/...``) are printed on their own line
whenever they are logged, whatever the step, because they are rare.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from tqdm import tqdm

from ulorl.logging.base import check_step, metric_value

# (metric name, column label) shown by default; eval metrics get their own line.
DEFAULT_COLUMNS: tuple[tuple[str, str], ...] = (
    ("critic/score/mean", "score"),
    ("actor/entropy", "entropy"),
    ("response_length/mean", "resp_len"),
    ("response_length/clip_ratio", "clip"),
    ("actor/dmmpt_mask_ratio", "mask"),
    ("actor/grad_norm", "grad"),
    ("rollout/unfinished_pool", "unfin"),
    ("rollout/experience_pool", "exp"),
    ("timing_s/step", "step_s"),
    ("perf/throughput", "tok/s"),
)


def format_value(value: float | int | None) -> str:
    """Short human form: ints as-is, floats with 4 significant digits, ``-`` when absent."""
    if value is None:
        return "-"
    if isinstance(value, int):
        return str(value)
    if not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if abs(value) >= 1000 and abs(value) < 1e7:
        return str(round(value))
    if value == int(value) and abs(value) < 1e7:
        return str(int(value))
    return f"{value:.4g}"


class ConsoleLogger:
    """Print selected metrics as aligned table rows every ``table_every`` steps."""

    def __init__(
        self,
        table_every: int = 10,
        columns: Sequence[tuple[str, str]] = DEFAULT_COLUMNS,
        header_every: int = 20,
        write: Callable[[str], None] = tqdm.write,
    ) -> None:
        if table_every < 1:
            raise ValueError(f"table_every must be >= 1, got {table_every}")
        if header_every < 1:
            raise ValueError(f"header_every must be >= 1, got {header_every}")
        self.table_every = table_every
        self.columns = tuple(columns)
        self.header_every = header_every
        self._write = write
        self._rows = 0
        self._closed = False
        labels = ["step", *(label for _, label in self.columns)]
        self._labels = labels
        self._widths = [max(len(label), 7) for label in labels]

    def _line(self, cells: Sequence[str]) -> str:
        return "  ".join(c.rjust(w) for c, w in zip(cells, self._widths))

    def log(self, metrics: dict[str, float], step: int) -> None:
        if self._closed:
            raise RuntimeError("ConsoleLogger is closed")
        check_step(step)
        evals = {k: metric_value(k, v) for k, v in metrics.items() if k.startswith("eval/")}
        if evals:
            body = "  ".join(f"{k}={format_value(v)}" for k, v in sorted(evals.items()))
            self._write(f"[eval] step {step}: {body}")
        train = {k: v for k, v in metrics.items() if not k.startswith("eval/")}
        if not train or (self._rows > 0 and step % self.table_every != 0):
            return
        cells = [str(step)]
        for name, _ in self.columns:
            cells.append(format_value(metric_value(name, train[name]) if name in train else None))
        wider = [max(w, len(c)) for w, c in zip(self._widths, cells)]
        if self._rows % self.header_every == 0 or wider != self._widths:
            self._widths = wider  # a cell outgrew its column: widen and repeat the header
            self._write(self._line(self._labels))
        self._write(self._line(cells))
        self._rows += 1

    def close(self) -> None:
        self._closed = True
