"""Row schemas and per-row validation (every row is checked at load time).

Two schemas: verl's (`prompt` = chat messages, answer at `reward_model.ground_truth`)
and flat keys (prompt string or messages, answer at `answer_key`, JSONL/TRL style).
Keys may be dotted paths into nested dicts (`reward_model.ground_truth`).
Answers may be strings or finite numbers (numbers become their string form); NaN,
infinities, booleans, lists, dicts and nulls are rejected. Text holding a NUL character,
and invalid UTF-8 in any column, make a bad row.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field

from ulorl.data.records import RowIssue

VERL_ANSWER_KEY = "reward_model.ground_truth"
_MISSING = object()


@dataclass(frozen=True)
class RowSchema:
    """Where each field lives in a row."""

    prompt_key: str = "prompt"
    answer_key: str = "answer"
    data_source_key: str = "data_source"
    messages_only: bool = False  # verl: the prompt must be a list of chat messages
    name: str = "flat"


def verl_schema(prompt_key: str = "prompt", data_source_key: str = "data_source") -> RowSchema:
    return RowSchema(prompt_key, VERL_ANSWER_KEY, data_source_key, messages_only=True, name="verl")


def guess_schema(first_row: dict | None, prompt_key: str, answer_key: str, data_source_key: str) -> RowSchema:
    """Auto mode: flat keys when the answer key is present, verl's schema when `reward_model` is."""
    flat = RowSchema(prompt_key, answer_key, data_source_key)
    if isinstance(first_row, dict) and get_path(first_row, answer_key) is _MISSING and "reward_model" in first_row:
        return verl_schema(prompt_key, data_source_key)
    return flat


@dataclass
class ValidRow:
    """A checked row: the prompt as a string or a list of {role, content} messages."""

    index: int
    prompt: str | list[dict]
    answer: str
    data_source: str
    extra_info: dict = field(default_factory=dict)

    @property
    def messages(self) -> list[dict]:
        if isinstance(self.prompt, str):
            return [{"role": "user", "content": self.prompt}]
        return self.prompt


def get_path(row: dict, dotted: str) -> object:
    """`row["a"]["b"]` for `a.b`; a top-level key containing dots wins; `_MISSING` when absent."""
    if dotted in row:
        return row[dotted]
    cur: object = row
    for part in dotted.split("."):
        if not isinstance(cur, dict) or part not in cur:
            return _MISSING
        cur = cur[part]
    return cur


def set_path(row: dict, dotted: str, value: object) -> dict:
    """A deep copy of `row` with the value at `dotted` replaced (created if absent)."""
    out = copy.deepcopy(row)
    if dotted in out or "." not in dotted:
        out[dotted] = value
        return out
    cur = out
    *parents, last = dotted.split(".")
    for part in parents:
        cur = cur.setdefault(part, {})
    cur[last] = value
    return out


def is_missing(value: object) -> bool:
    return value is _MISSING


def _text(value: object, i: int, name: str, what: str) -> str | RowIssue:
    """A str (bytes decoded as UTF-8) that encodes as valid UTF-8, or the issue."""
    if isinstance(value, bytes):
        try:
            value = value.decode("utf-8")
        except UnicodeDecodeError as e:
            return RowIssue(i, name, "undecodable_text", "valid UTF-8 text", f"an invalid byte at position {e.start}")
    if not isinstance(value, str):
        return RowIssue(i, name, "wrong_type", what, type(value).__name__)
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        return RowIssue(i, name, "undecodable_text", "valid UTF-8 text",
                        f"an invalid byte or lone surrogate at character {e.start}")
    if "\x00" in value:  # no tokenizer, template or answer checker expects it; often a binary column read as text
        return RowIssue(i, name, "nul_character", "text without NUL characters",
                        f"a NUL at character {value.index(chr(0))}")
    return value


def _messages(value: list, i: int, name: str) -> list[dict] | RowIssue:
    if not value:
        return RowIssue(i, name, "empty_prompt", "a non-empty list of chat messages", "[]")
    out = []
    for j, m in enumerate(value):
        if not isinstance(m, dict) or "role" not in m or "content" not in m:
            got = type(m).__name__ if not isinstance(m, dict) else f"keys {sorted(m)}"
            return RowIssue(i, f"{name}[{j}]", "bad_messages", "a {role, content} message", got)
        role = _text(m["role"], i, f"{name}[{j}].role", "a string role")
        content = _text(m["content"], i, f"{name}[{j}].content", "string content")
        for r in (role, content):
            if isinstance(r, RowIssue):
                r.reason = "bad_messages" if r.reason == "wrong_type" else r.reason
                return r
        out.append({"role": role, "content": content})
    if not any(m["content"].strip() for m in out):
        return RowIssue(i, name, "empty_prompt", "at least one message with non-blank content", "blank messages")
    return out


def _prompt(value: object, i: int, schema: RowSchema) -> str | list[dict] | RowIssue:
    name = schema.prompt_key
    if is_missing(value) or value is None:
        return RowIssue(i, name, "missing_field", "a prompt", "nothing")
    if isinstance(value, (list, tuple)):
        return _messages(list(value), i, name)
    if schema.messages_only:
        return RowIssue(i, name, "bad_messages", "a list of {role, content} chat messages (verl schema)",
                        type(value).__name__)
    text = _text(value, i, name, "a string or a list of {role, content} messages")
    if isinstance(text, str) and not text.strip():
        return RowIssue(i, name, "empty_prompt", "non-blank prompt text", repr(text))
    return text


def _answer(value: object, i: int, name: str) -> str | RowIssue:
    if is_missing(value) or value is None:
        return RowIssue(i, name, "missing_field", "a reference answer", "nothing")
    if isinstance(value, float) and not math.isfinite(value):  # JSON's NaN/Infinity: "nan" then matched \boxed{nan}
        return RowIssue(i, name, "non_finite", "a finite number or a string answer", str(value))
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    text = _text(value, i, name, "a string (or number) answer")
    if isinstance(text, str) and not text.strip():
        return RowIssue(i, name, "missing_field", "a non-blank reference answer", repr(text))
    return text


def undecodable_field(row: dict) -> str | None:
    """Dotted path of the first string anywhere in `row` holding invalid UTF-8 (kept by the JSONL reader as
    lone surrogates), else None. Iterative: a deeply nested row cannot exhaust the stack."""
    stack: list[tuple[str, object]] = [(str(k), v) for k, v in row.items()]
    while stack:
        path, value = stack.pop()
        if isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                return path
        elif isinstance(value, dict):
            stack.extend((f"{path}.{k}", v) for k, v in value.items())
        elif isinstance(value, (list, tuple)):
            stack.extend((f"{path}[{j}]", v) for j, v in enumerate(value))
    return None


def validate_row(row: dict | RowIssue, i: int, schema: RowSchema, default_source: str) -> ValidRow | RowIssue:
    """Check one row; the first problem found is returned as a `RowIssue`."""
    if isinstance(row, RowIssue):
        return row
    prompt = _prompt(get_path(row, schema.prompt_key), i, schema)
    if isinstance(prompt, RowIssue):
        return prompt
    answer = _answer(get_path(row, schema.answer_key), i, schema.answer_key)
    if isinstance(answer, RowIssue):
        return answer
    source = get_path(row, schema.data_source_key)
    if is_missing(source) or source is None:
        source = default_source
    source = _text(source, i, schema.data_source_key, "a string data source")
    if isinstance(source, RowIssue):
        return source
    extra = row.get("extra_info")
    if extra is not None and not isinstance(extra, dict):
        return RowIssue(i, "extra_info", "wrong_type", "a dict (or absent)", type(extra).__name__)
    bad = undecodable_field(row)
    if bad is not None:
        return RowIssue(i, bad, "undecodable_text", "valid UTF-8 text in every column",
                        "an invalid byte or lone surrogate (it could not be written back)")
    return ValidRow(i, prompt, answer.strip(), source, dict(extra or {}))
