"""Weights & Biases logger, offline by default.

Needs the optional ``wandb`` package (``pip install 'ulorl[wandb]'``). The run
is created with ``dir=RUN_DIR`` and ``mode="offline"`` unless told otherwise,
so nothing leaves the machine; upload later with ``wandb sync RUN_DIR/wandb``.
The run name is the run folder's name and the full config is attached.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ulorl.logging.base import check_step, metric_value

INSTALL_HINT = "pip install 'ulorl[wandb]'"


class WandbLogger:
    """Log each step's metrics with ``wandb.log(metrics, step=step)``."""

    def __init__(
        self,
        run_dir: str | Path,
        project: str = "ulorl",
        mode: str = "offline",
        config: dict[str, Any] | None = None,
        name: str | None = None,
    ) -> None:
        try:
            import wandb
        except ImportError as e:
            raise ImportError(
                f"the wandb logger needs the 'wandb' package, which is not installed: "
                f"{INSTALL_HINT} (or drop 'wandb' from logging.loggers)"
            ) from e
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._run: Any = wandb.init(
            project=project,
            dir=str(self.run_dir),
            mode=mode,
            name=name or self.run_dir.resolve().name,
            config=config,
        )

    def log(self, metrics: dict[str, float], step: int) -> None:
        if self._run is None:
            raise RuntimeError("WandbLogger is closed")
        check_step(step)
        self._run.log({k: metric_value(k, v) for k, v in metrics.items()}, step=step)

    def close(self) -> None:
        if self._run is not None:
            self._run.finish()
            self._run = None
