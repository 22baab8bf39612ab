"""A shared leaf: the request loop of a child process that serves its driver over a pipe, for the process learner
(`learners/process.py`) and the engine processes (`rollout/engines/torch/processes.py`).

A child ignores SIGINT and SIGTERM (the driver's handler decides when to stop), answers every message with
("ok", value) or an error reply, and ends on ("close",) or when the driver's end of the pipe closes (a driver
killed with SIGKILL leaves no orphan).
"""

from __future__ import annotations

import signal
import traceback
from collections.abc import Callable

import torch


def child_start(threads: int) -> None:
    """What every child does first: ignore the driver's stop signals, use `threads` torch threads."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    torch.set_num_threads(threads)


def serve(conn, handle: Callable[[tuple], object],
          error_replies: Callable[[BaseException, str], list[tuple]]) -> None:
    """Answer messages until ("close",) or EOF: ("ok", handle(message)), or on an exception the first of
    `error_replies(exception, traceback)` that can be sent (an exception that does not pickle can fall back to its
    traceback; so does a value that does not pickle). A reply that cannot be sent because the driver is gone ends
    the loop."""
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):  # the driver is gone
            return
        if msg[0] == "close":
            return
        try:
            replies = [("ok", handle(msg))]
        except Exception as e:  # noqa: BLE001 - every failure goes back to the driver
            replies = error_replies(e, traceback.format_exc())
        while replies:
            reply = replies.pop(0)
            try:
                conn.send(reply)  # pickles first: a reply that does not pickle writes nothing
                break
            except (OSError, EOFError):  # the driver is gone
                return
            except Exception as e:  # noqa: BLE001 - the reply does not pickle: the next one
                if not replies:
                    if reply[0] != "ok":
                        raise
                    replies = error_replies(e, traceback.format_exc())
