"""Typed construction of nested config dataclasses from YAML and dotted overrides.

`load_config(RunConfig, "configs/demo.yaml", ["rollout.num_segments=4"])` reads the
YAML, applies verl-style `a.b=value` overrides (values parsed as YAML), and builds
the dataclasses with type checks. Unknown keys, wrong types and invalid values fail
with `ConfigError` naming the dotted key and what is allowed.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import re
import types
import typing
from pathlib import Path
from typing import Any

import yaml

from ulorl.errors import ConfigError, check_choice

__all__ = ["ConfigError", "build", "changed_settings", "check_choice", "deep_merge", "dump_yaml", "flatten",
           "load_config", "parse_overrides", "to_dict", "yaml_scalar"]


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def _coerce(value: Any, tp: Any, key: str) -> Any:
    """Check/convert one value to the annotated type `tp`."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in (a for a in args if a is not type(None)):
            try:
                return _coerce(value, arg, key)
            except ConfigError as e:
                errors.append(str(e))
        if len(errors) == 1:  # `float | None` and the like: the one real type's message is the clearer one
            raise ConfigError(errors[0])
        raise ConfigError(f"{key}: expected {' or '.join(_type_name(a) for a in args)}, got {value!r}")
    if dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            return value
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping of {tp.__name__} fields, got {value!r}")
        return build(tp, value, key + ".")
    if origin in (list, tuple):
        if isinstance(value, str):
            value = [v for v in value.split(",") if v]
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{key}: expected a list, got {value!r}")
        (item_tp, *_) = typing.get_args(tp) or (Any,)
        return [_coerce(v, item_tp, f"{key}[{i}]") for i, v in enumerate(value)]
    if origin is dict or tp is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping, got {value!r}")
        return dict(value)
    if tp is Any:
        return value
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{key}: expected true or false, got {value!r}")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise ConfigError(f"{key}: expected an integer, got {value!r}")
    if tp is float:
        return _finite(_number(value, key), key)
    if tp is str:
        if isinstance(value, str):
            return value
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)
        raise ConfigError(f"{key}: expected a string, got {value!r}{_trailing_colon(value)}")
    if isinstance(tp, type) and isinstance(value, tp):
        return value
    raise ConfigError(f"{key}: expected {_type_name(tp)}, got {value!r}")


def _trailing_colon(value: Any) -> str:
    """For `key=text:` read by YAML as the mapping {text: None}: what the user most likely wrote, and why it is not
    text (a reward function's reference without the function's name after its colon, for one)."""
    if isinstance(value, dict) and len(value) == 1 and next(iter(value.values())) is None:
        return f" (YAML reads `{next(iter(value))}:` as a mapping: something is missing after the colon)"
    return ""


def _number(value: Any, key: str) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)  # YAML 1.1 reads `1e-6` as a string
        except ValueError:
            pass
    raise ConfigError(f"{key}: expected a number, got {value!r}")


def _finite(value: float, key: str) -> float:
    """NaN passes every `x <= 0` check and inf corrupts the first update: no config float may be either."""
    if not math.isfinite(value):
        raise ConfigError(f"{key}={value} is not a finite number; give a real value (NaN and inf are never valid)")
    return value


def _coerce_field(value: Any, tp: Any, key: str, field: dataclasses.Field) -> Any:
    """`_coerce`, and a null given to a setting that takes none is told the setting's default."""
    try:
        return _coerce(value, tp, key)
    except ConfigError as e:
        if value is None and field.default is not dataclasses.MISSING:
            raise ConfigError(f"{e}; this setting cannot be null (its default: {field.default!r})") from None
        raise


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def check_field_types(obj: Any, prefix: str, skip: tuple[str, ...] = ()) -> None:
    """For a config made in code (`SFTConfig(steps="x")`, `dataclasses.replace(cfg.train, steps="3")`): a
    `ConfigError` naming the key when a field holds what `build` would refuse, or would have to convert, from YAML
    (`"3"` for an integer, `5` for a path). A value that `build` made passes as it is. `skip`: fields that also take
    what their annotation does not say (a reward function given as a callable). An equal value is stored as `build`
    makes it (a `pathlib.Path` as its string, 3.0 as 3 in an integer setting)."""
    for f in dataclasses.fields(obj):
        if f.name in skip or not f.init:
            continue
        value, key = _fspaths(getattr(obj, f.name)), prefix + f.name
        coerced = _coerce_field(value, _hints(type(obj))[f.name], key, f)
        if _plain_lists(coerced) != _plain_lists(value):
            raise ConfigError(f"{key}: expected {_type_name(_hints(type(obj))[f.name])}, got {value!r} (a "
                              f"{type(value).__name__})")
        setattr(obj, f.name, coerced)  # as YAML gives it: 3 for 3.0 in an integer, a list for a tuple


def _fspaths(value: Any) -> Any:
    """`os.PathLike` values as strings, also inside a list."""
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, list) and any(isinstance(v, os.PathLike) for v in value):
        return [_fspaths(v) for v in value]
    return value


def _plain_lists(value: Any) -> Any:
    """Tuples as lists, recursively: a tuple given for a list setting is the same setting."""
    if isinstance(value, (list, tuple)):
        return [_plain_lists(v) for v in value]
    return value


def build(cls: type, data: dict, prefix: str = "") -> Any:
    """Build dataclass `cls` from a (possibly partial) mapping, checking keys and types."""
    hints = _hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        from ulorl.config.hints import unknown_key_hint  # did-you-mean and verl's key names

        hint = unknown_key_hint(prefix, unknown[0], data[unknown[0]], sorted(fields))
        raise ConfigError(
            f"unknown config key {prefix}{unknown[0]}{hint}; valid keys under "
            f"'{prefix.rstrip('.') or 'top level'}': {', '.join(sorted(fields))}"
        )
    kwargs = {name: _coerce_field(v, hints[name], prefix + name, fields[name]) for name, v in data.items()}
    try:
        return cls(**kwargs)
    except (ValueError, TypeError) as e:  # ConfigError included: a message naming a key of the section gets its prefix
        msg = str(e)
        if isinstance(e, ConfigError) and (msg.startswith(prefix) or not prefix):
            raise
        raise ConfigError(msg if msg.startswith(prefix) or not prefix else f"{prefix}{msg}") from e


def parse_overrides(overrides: list[str]) -> dict:
    """`["a.b=1", "c=x"]` -> nested dict, values parsed as YAML."""
    out: dict = {}
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {item!r} must look like key.subkey=value")
        key, raw = item.split("=", 1)
        parts = key.strip().split(".")
        if not all(parts):
            raise ConfigError(f"override {item!r}: empty key segment")
        try:
            value = yaml.safe_load(raw) if raw != "" else ""
        except yaml.YAMLError:
            value = raw
        node = out
        for p in parts[:-1]:
            node = node.setdefault(p, {})
            if not isinstance(node, dict):
                raise ConfigError(f"override {item!r} conflicts with an earlier override of {p}")
        node[parts[-1]] = value
    return out


def deep_merge(base: dict, extra: dict) -> dict:
    out = dict(base)
    for k, v in extra.items():
        out[k] = deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses a mapping naming the same key twice (PyYAML keeps the last one silently)."""

    def construct_mapping(self, node, deep=False):
        seen: dict = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise ConfigError(f"duplicate key {key!r} at line {key_node.start_mark.line + 1} (first at line "
                                  f"{seen[key]}); keep one of them")
            seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)


def read_yaml(p: Path) -> Any:
    """The YAML document of file `p`; every way it can be unreadable is a one-line `ConfigError`."""
    if not p.exists():
        raise ConfigError(f"config file {p} does not exist")
    if p.is_dir():
        raise ConfigError(f"config file {p} is a directory; give a YAML file (see configs/)")
    try:
        text = p.read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"config file {p} is not UTF-8 text (invalid byte at offset {e.start})") from None
    except OSError as e:
        raise ConfigError(f"config file {p} cannot be read: {e.strerror}") from None
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)
    except ConfigError as e:
        raise ConfigError(f"config file {p}: {e}") from None
    except (yaml.YAMLError, RecursionError) as e:
        raise ConfigError(f"config file {p} is not valid YAML: {_yaml_problem(e)}") from None


def _yaml_problem(e: Exception) -> str:
    """A YAML parse error on one line, at its line and column of the file (PyYAML's own text spans several lines
    and names the text `"<unicode string>"`)."""
    mark, problem = getattr(e, "problem_mark", None), getattr(e, "problem", None)
    if mark is None or not problem:
        return " ".join(str(e).split()) or type(e).__name__
    context = getattr(e, "context", None)
    return f"line {mark.line + 1}, column {mark.column + 1}: {problem}" + (f" ({context})" if context else "")


def load_config(cls: type, path: str | Path | None = None, overrides: list[str] | None = None) -> Any:
    """YAML file (optional) + dotted overrides -> validated dataclass `cls`."""
    data: dict = {}
    if path is not None:
        p = Path(path)
        data = read_yaml(p) or {}
        if not isinstance(data, dict):
            raise ConfigError(f"config file {p} must hold a mapping at top level")
    given = parse_overrides(overrides or [])
    try:
        return build(cls, deep_merge(data, given))
    except ConfigError as e:  # a setting the file gave (and no override replaced): the message names the file
        key = re.search(r"^unknown config key (\w[\w.]*)|\b[a-z_]+(?:\.[a-z_0-9]+)+\b", str(e))
        dotted = key and (key.group(1) or key.group())
        if path is None or not dotted or _lookup(given, dotted) or not _lookup(data, dotted):
            raise
        raise ConfigError(f"config file {path}: {e}") from e


def _lookup(data: dict, dotted: str) -> bool:
    """Whether the nested mapping `data` holds the dotted key `dotted` (`train.steps`, `unknown config key` too)."""
    for part in dotted.split("."):
        if not isinstance(data, dict) or part not in data:
            return False
        data = data[part]
    return True


def to_dict(cfg: Any) -> dict:
    """A dataclass tree as plain dicts (for YAML/JSON).

    A callable (a reward function passed in code, `ulorl.api`) is written as its `module:qualname`
    reference (loadable back when its module is importable) or, for other callable objects, a description."""
    return _plain(dataclasses.asdict(cfg))


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if callable(value):
        if isinstance(value, (types.FunctionType, types.BuiltinFunctionType)):
            return f"{value.__module__}:{value.__qualname__}"
        return f"<{type(value).__module__}.{type(value).__qualname__} object>"
    return value


def dump_yaml(cfg: Any) -> str:
    return yaml.safe_dump(to_dict(cfg), sort_keys=False)


def flatten(d: dict, prefix: str = "") -> dict:
    """A nested mapping as one level of dotted keys: `{"a": {"b": 1}}` -> `{"a.b": 1}`; an empty mapping is a leaf."""
    out = {}
    for k, v in d.items():
        if isinstance(v, dict) and v:
            out.update(flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def yaml_scalar(value: Any) -> str:
    """A config value as a YAML file writes it: null, true / false, numbers and quoted strings as Python does."""
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    return repr(value)


def changed_settings(cfg: Any) -> list[str]:
    """The settings of `cfg` that differ from its class's defaults, in the class's order, each as
    `key: value (default: old)`: what a run's first screen shows instead of every setting. A key of a mapping
    setting that is empty by default (`data.chat_template_kwargs.enable_thinking`) says `(not set by default)`."""
    now, default = flatten(to_dict(cfg)), flatten(to_dict(type(cfg)()))
    return [f"{k}: {yaml_scalar(v)} " + (f"(default: {yaml_scalar(default[k])})" if k in default
                                         else "(not set by default)")
            for k, v in now.items() if k not in default or default[k] != v]
