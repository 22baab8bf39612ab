"""Reward functions by name: built-ins (a str Enum) and user functions, with their calling style.

Built-ins:

- ``rule``: extract the final answer, then math-verify equivalence with the
  reference (in the killable worker pool). Reward in {0, 1}.
- ``exact``: extract the final answer, then compare normalised strings
  (strip, no whitespace, no ``$``) in the trainer process. Reward in {0, 1}.
  Enough for the built-in integer task and much cheaper.

A user function is named ``module:function`` (importable: on ``sys.path``) or
``path/to/file.py:function`` (loaded from the file; a relative path is taken
from the working directory). Two calling styles (:class:`RewardStyle`), told
apart from the signature or declared:

- ``verl``: one call per sample,
  ``compute_score(data_source, solution_str, ground_truth, extra_info=None)``
  returning a number or a dict with a ``"score"`` key (other numeric keys are
  logged as metrics). Runs in the worker pool under the per-item deadline.
- ``batch`` (TRL): one call per batch, ``fn(completions, **columns)`` returning
  one number (or ``None``: "does not apply") per completion. The columns are
  ``prompts``, ``ground_truth``, ``data_source``, ``extra_info`` and every key
  of the ``extra_info`` dicts. Runs in the trainer process (TRL's way: such
  functions often hold a model), so it has no deadline.

Detection (``style="auto"``): a parameter named ``completions`` -> batch; a
parameter named ``solution_str`` or ``data_source`` -> verl; otherwise the
style must be declared. Deviation from TRL: completions are always plain
strings (decoded text), never chat-message lists.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import math
import os
import sys
import zlib
from collections.abc import Callable
from enum import Enum
from pathlib import Path
from typing import Any

__all__ = [
    "BATCH_COLUMNS",
    "BuiltinReward",
    "RewardStyle",
    "UserRewardFn",
    "batch_needs",
    "call_user_fn",
    "check_signature",
    "detect_style",
    "load_function",
    "parse_result",
    "parse_reward_fn",
    "score_from_result",
]

BATCH_COLUMNS = ("completions", "prompts", "ground_truth", "data_source", "extra_info")
"""Keyword arguments a batch (TRL-style) function always receives (lists, one entry per sample)."""


class BuiltinReward(str, Enum):
    """Names of the built-in reward functions."""

    RULE = "rule"
    EXACT = "exact"


class RewardStyle(str, Enum):
    """How a user reward function is called."""

    AUTO = "auto"  # told from the signature
    VERL = "verl"  # per sample: (data_source, solution_str, ground_truth, extra_info) -> float | dict
    BATCH = "batch"  # TRL: fn(completions, **columns) -> list[float | None]


class UserRewardFn(str):
    """A ``module:function`` or ``path/to/file.py:function`` reference to a user reward function."""


def _split_ref(ref: str) -> tuple[str, str]:
    """``"a/b.py:fn"`` -> ``("a/b.py", "fn")``; the *last* colon splits (Windows drive letters keep theirs)."""
    target, sep, attr = ref.rpartition(":")
    if not sep or not target or not attr:
        raise ValueError(f"a reward function must look like 'module:function' or 'path/to/file.py:function', "
                         f"got {ref!r}")
    return target, attr


def _is_path(target: str) -> bool:
    return target.endswith(".py") or os.sep in target or "/" in target


def _no_exit(fn: Callable, arg: Any, target: str) -> Any:
    """`fn(arg)`, with a `sys.exit()` in the imported module turned into an ImportError that names it (it would
    otherwise end ulorl silently, with the module's exit status)."""
    try:
        return fn(arg)
    except SystemExit as e:
        raise ImportError(f"importing {target!r} called sys.exit({e.code!r}); a reward module must not exit at "
                          "import") from None


def load_function(ref: str) -> Callable:
    """Import ``"pkg.mod:fn"`` or load ``"path/to/file.py:fn"`` and return the callable.

    A file is loaded once per process as module ``ulorl_user_reward_<stem>`` (its own
    folder is put on ``sys.path`` first, so it may import its neighbours)."""
    target, attr = _split_ref(ref)
    if _is_path(target):
        path = Path(target).expanduser().resolve()
        if path.is_dir():
            raise FileNotFoundError(f"{str(path)!r} is a folder, not a Python file (from reward function {ref!r}: "
                                    "'path/to/file.py:function')")
        if not path.is_file():
            raise FileNotFoundError(f"no such file {str(path)!r} (from reward function {ref!r})")
        mod_name = f"ulorl_user_reward_{path.stem}_{zlib.crc32(str(path).encode()):08x}"
        module = sys.modules.get(mod_name)
        if module is None:
            spec = importlib.util.spec_from_file_location(mod_name, path)
            if spec is None or spec.loader is None:
                raise ImportError(f"cannot load {str(path)!r} as a Python module")
            module = importlib.util.module_from_spec(spec)
            if str(path.parent) not in sys.path:
                sys.path.insert(0, str(path.parent))
            sys.modules[mod_name] = module
            try:
                _no_exit(spec.loader.exec_module, module, target)
            except BaseException:
                del sys.modules[mod_name]
                raise
    else:
        module = _no_exit(importlib.import_module, target, target)
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):  # named as the user named it, not as the module it was loaded as
            raise AttributeError(f"{target!r} has no {attr!r}" + (f" (no {part!r} in it)" if part != attr else ""))
        obj = getattr(obj, part)
    if not callable(obj):
        raise TypeError(f"{ref!r} is not callable")
    return obj


def _params(fn: Callable) -> list[inspect.Parameter]:
    try:
        return list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):  # some builtins have no signature: let the call decide
        return []


def detect_style(fn: Callable, declared: str | RewardStyle = RewardStyle.AUTO, name: str = "") -> RewardStyle:
    """The calling style of ``fn``: ``declared`` unless ``auto``, else told from parameter names."""
    style = RewardStyle(declared)
    if style is not RewardStyle.AUTO:
        return style
    names = [p.name for p in _params(fn)]
    if "completions" in names:
        return RewardStyle.BATCH
    if "solution_str" in names or "data_source" in names:
        return RewardStyle.VERL
    raise ValueError(
        f"cannot tell how to call reward function {name or fn!r} from its parameters {names}: name them like "
        "verl (data_source, solution_str, ground_truth, extra_info) or TRL (completions, **kwargs), or declare "
        "style: verl | batch"
    )


def check_signature(fn: Callable, style: RewardStyle, name: str = "") -> None:
    """Raise ``ValueError`` (naming the function and the fix) when ``fn`` cannot take ``style``'s arguments."""
    params = _params(fn)
    if not params and style is RewardStyle.VERL:
        return
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return
    label = name or getattr(fn, "__name__", repr(fn))
    if style is RewardStyle.VERL:
        try:
            sig.bind("data_source", "solution_str", "ground_truth", {})
        except TypeError as e:
            raise ValueError(f"reward function {label!r} (style verl) must accept "
                             f"(data_source, solution_str, ground_truth, extra_info): {e}; its signature is "
                             f"{label}{sig}") from None
        return
    if style is RewardStyle.BATCH:  # a required parameter that is no column: an extra_info key (`batch_needs`)
        has_var_kw = any(p.kind is p.VAR_KEYWORD for p in params)
        if not has_var_kw and "completions" not in [p.name for p in params]:
            raise ValueError(f"reward function {label!r} (style batch) must take a 'completions' argument")
        return
    raise ValueError(f"style must be verl or batch after detection, got {style!r}")


def batch_needs(fn: Callable, columns: tuple[str, ...] = BATCH_COLUMNS) -> list[str]:
    """The required parameters of a batch (TRL-style) function that are none of the `columns` ulorl always passes:
    it gets them from the rows' `extra_info` keys (TRL passes a dataset's columns), so every row must hold them."""
    return [p.name for p in _params(fn) if p.default is p.empty
            and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name not in columns]


def parse_reward_fn(name: str, *, check_import: bool = True) -> BuiltinReward | UserRewardFn:
    """Resolve a reward-function name.

    ``"rule"`` / ``"exact"`` give a :class:`BuiltinReward`; ``"pkg.mod:fn"`` or
    ``"file.py:fn"`` gives a :class:`UserRewardFn` (loaded once here when
    ``check_import`` so that a typo fails at start-up, not in a worker). Anything
    else raises ``ValueError`` listing the valid names.
    """
    if isinstance(name, BuiltinReward):
        return name
    if ":" in name:
        _split_ref(name)
        if check_import:
            try:
                load_function(name)
            except Exception as e:  # noqa: BLE001 - user module code may raise anything at import
                raise ValueError(f"cannot load user reward function {name!r}: {type(e).__name__}: {e}") from e
        return UserRewardFn(name)
    try:
        return BuiltinReward(name)
    except ValueError:
        valid = [b.value for b in BuiltinReward]
        raise ValueError(
            f"unknown reward function {name!r}; valid: {valid}, 'module:function' or 'path/to/file.py:function'"
        ) from None


def _number(value: Any, what: str) -> float:
    """A number, a bool, or a numpy / torch scalar as a float; text is refused, even "1.0" (a function that returns
    text returns the wrong thing, whatever the text is)."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (str, bytes)):
        raise ValueError(f"{what} must be a number, got {type(value).__name__} {value!r:.80} (text, even a "
                         "number's, is refused)")
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{what} must be a number, got {type(value).__name__} {value!r:.80}") from None


def parse_result(result: Any) -> tuple[float, dict[str, float]]:
    """A verl-style return value -> ``(score, extra numeric metrics)``.

    A number is the score; a dict must hold ``"score"``, its other keys with
    numeric (or bool) values become metrics and the rest (strings, lists) are
    dropped. The score may be non-finite here: the caller checks it and names the
    function and sample."""
    if isinstance(result, dict):
        if "score" not in result:
            raise ValueError(f"reward dict has no 'score' key (keys: {sorted(map(str, result))[:10]})")
        extras = {}
        for k, v in result.items():
            if k != "score" and isinstance(v, (int, float)) and not (isinstance(v, float) and math.isnan(v)):
                extras[str(k)] = float(v)
        return _number(result["score"], "reward dict's 'score'"), extras
    return _number(result, "reward"), {}


def score_from_result(result: Any) -> float:
    """Only the score of :func:`parse_result`, which must be finite."""
    value, _ = parse_result(result)
    if not math.isfinite(value):
        raise ValueError(f"reward is not finite: {value}")
    return value


def call_user_fn(
    ref: str, data_source: str | None, solution_str: str, ground_truth: str, extra_info: Any
) -> tuple[float, dict[str, float]]:
    """Worker-side entry point: call the verl-style function ``ref``; returns ``(score, extras)``."""
    fn = _USER_FN_CACHE.get(ref)
    if fn is None:
        fn = _USER_FN_CACHE[ref] = load_function(ref)
    return parse_result(fn(data_source, solution_str, ground_truth, extra_info))


_USER_FN_CACHE: dict[str, Any] = {}
