"""`UlorlError`: the base of errors a user causes and can fix (bad input, a run that cannot go on).

The CLI prints such an error as one line, `ulorl COMMAND: error: MESSAGE`, without a
traceback unless `--debug` is given; the message names what went wrong and the fix.
`ConfigError` and its one "choose one of" check live here too, so that a registry below
the config (an engine's, a reward's) can refuse a name without importing the config package.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import Enum
from typing import Any


class UlorlError(Exception):
    """An error the user can fix; its message is complete on one line."""


class ConfigError(UlorlError, ValueError):
    """A config problem, reported with the dotted key it concerns."""


def check_choice(key: str, value: Any, allowed: Iterable[str | Enum], also: str = "") -> None:
    """Raise `ConfigError` unless `value` is one of `allowed` (an Enum class or names), naming the key and choices.

    `also` names further accepted forms that are not a fixed list (e.g. "'module:function'").
    The one "choose one of" check of every config section: the message reads
    `KEY='VALUE' is not allowed; choose one of: a, b, c`."""
    names = [a.value if isinstance(a, Enum) else a for a in allowed]
    if isinstance(value, Enum):
        value = value.value
    if value not in names:
        choices = ", ".join(names) + (f", {also}" if also else "")
        raise ConfigError(f"{key}={value!r} is not allowed; choose one of: {choices}")
