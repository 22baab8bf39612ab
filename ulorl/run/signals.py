"""SIGTERM/SIGINT during a run: finish the step, checkpoint, exit; a second signal stops at once."""

from __future__ import annotations

import signal

from ulorl.run.console import say


class StopOnSignal:
    """SIGTERM/SIGINT set a flag; the loop checkpoints at the step boundary and exits."""

    def __init__(self) -> None:
        self.requested = False
        self._old = {}
        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                self._old[sig] = signal.signal(sig, self._handle)
            except ValueError:  # not in the main thread
                pass

    def _handle(self, signum, frame) -> None:
        if self.requested:  # second signal: stop now
            raise KeyboardInterrupt
        self.requested = True
        say(f"signal {signum}: finishing the current step, then checkpointing")

    def restore(self) -> None:
        for sig, h in self._old.items():
            signal.signal(sig, h)
