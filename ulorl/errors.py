"""`UlorlError`: the base of errors a user causes and can fix (bad input, a run that cannot go on).

The CLI prints such an error as one line, `ulorl COMMAND: error: MESSAGE`, without a
traceback unless `--debug` is given; the message names what went wrong and the fix.
"""

from __future__ import annotations


class UlorlError(Exception):
    """An error the user can fix; its message is complete on one line."""
