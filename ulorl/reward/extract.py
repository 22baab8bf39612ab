"""Final-answer extraction from a model response.

A response is a long piece of text (up to hundreds of kilobytes for 128k-token
answers); only its *final answer* is compared with the reference. Extraction
runs in the trainer process (it is linear-time, regex-free of backtracking
hazards), so only short answer strings travel to the verification workers.

Extractors are registered by name (`EXTRACTORS`, keys of the str Enum
`Extractor` for the built-ins); the reward configuration maps a data source to
an extractor name (`ExtractorMap`). The built-ins:

- ``boxed``: content of the last ``\\boxed{...}`` / ``\\fbox{...}`` with
  balanced nested braces (``\\boxed{\\frac{1}{2}}`` -> ``\\frac{1}{2}``), or the
  token after ``\\boxed `` (``\\boxed 5``). The last *complete* box wins; an
  unclosed box (a response cut in the middle of its answer) is skipped.
- ``answer_colon``: the rest of the line after the last ``Answer:``
  (case-insensitive; markdown ``**Answer:**`` and a trailing period are
  stripped, and an answer on the following line is taken when the line is
  empty).
- ``builtin``: the format of the built-in synthetic task, whose responses end
  with ``answer X``: the token after the last (lower-case) word ``answer``.
- ``gsm8k``: GSM8K's format: the rest of the line after the last ``####``
  (``#### 1,234`` -> ``1,234``); else the ``default`` chain; else the last
  number of the response (``last_number``).
- ``last_number``: the last number in the response (``-3``, ``1,234.5``,
  ``3/4``), for models that end with "... so she pays 42 dollars.".
- ``default``: the chain boxed -> answer_colon -> builtin; the first
  extractor that finds something wins.

Data sources with a well-known format get their extractor unless the
configuration maps them (``SOURCE_EXTRACTORS``: ``gsm8k`` and
``openai/gsm8k`` -> ``gsm8k``). The last-number fallback is never used for
other sources: on a long reasoning trace the last number is often not the
answer.

Every extractor returns ``None`` when it finds nothing; an empty box returns
``""`` (callers treat both as "no answer").
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from enum import Enum

__all__ = [
    "Extractor",
    "EXTRACTORS",
    "ExtractorMap",
    "extract_answer",
    "extract_answer_colon",
    "extract_boxed",
    "extract_builtin",
    "extract_gsm8k",
    "extract_last_number",
    "get_extractor",
    "register_extractor",
]

ExtractorFn = Callable[[str], "str | None"]


class Extractor(str, Enum):
    """Names of the built-in extractors."""

    BOXED = "boxed"
    ANSWER_COLON = "answer_colon"
    BUILTIN = "builtin"
    GSM8K = "gsm8k"
    LAST_NUMBER = "last_number"
    DEFAULT = "default"


# ``\boxed{`` / ``\boxed {`` / ``\fbox{``; group 1 is set when a brace follows.
_BOX_RE = re.compile(r"\\(?:boxed|fbox)(?:\s*(\{)|(?=\s))")
_BOX_TOKEN_RE = re.compile(r"\s+([^\s${}]+)")
_ANSWER_COLON_RE = re.compile(r"(?i)\banswer\b\**\s*[:\uff1a]\**")
_BUILTIN_RE = re.compile(r"\banswer\b")
_TOKEN_RE = re.compile(r"[ \t\r\n]+(\S+)")
_TRAILING_PUNCT = ".,;:!?"
_HASHES_RE = re.compile(r"####[ \t]*([^\n]*)")
# a number: sign, digits with optional thousands commas, decimals, an optional "/denominator"
_NUMBER_RE = re.compile(r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:/\d+)?")


def _match_braces(text: str, opens: set[int]) -> dict[int, int]:
    """Closing index for each opening-brace position in ``opens``.

    One left-to-right pass with a stack, so the cost is linear even for deeply
    nested or unbalanced input (a million ``{`` is fine).
    """
    closes: dict[int, int] = {}
    stack: list[int] = []
    start = min(opens)
    for m in re.finditer(r"[{}]", text[start:]):
        pos = start + m.start()
        if m.group() == "{":
            stack.append(pos)
        elif stack:
            open_pos = stack.pop()
            if open_pos in opens:
                closes[open_pos] = pos
    return closes


def extract_boxed(text: str) -> str | None:
    """Content of the last complete ``\\boxed{...}`` in ``text`` (nested braces kept)."""
    boxes = list(_BOX_RE.finditer(text))
    if not boxes:
        return None
    brace_opens = {m.start(1) for m in boxes if m.group(1) is not None}
    closes = _match_braces(text, brace_opens) if brace_opens else {}
    for m in reversed(boxes):
        if m.group(1) is None:  # "\boxed 5" form
            tok = _BOX_TOKEN_RE.match(text, m.end())
            if tok:
                return tok.group(1)
            continue
        open_pos = m.start(1)
        if open_pos in closes:
            return text[open_pos + 1 : closes[open_pos]].strip()
    return None


def _clean_line_answer(s: str) -> str:
    s = s.strip().strip("*").strip()
    s = s.rstrip(_TRAILING_PUNCT).strip()
    if len(s) >= 2 and s[0] == "$" and s[-1] == "$":
        s = s.strip("$").strip()
    if s.startswith("\\(") and s.endswith("\\)"):
        s = s[2:-2].strip()
    return s


def extract_answer_colon(text: str) -> str | None:
    """Rest of the line after the last ``Answer:`` (or the next non-empty line)."""
    last = None
    for last in _ANSWER_COLON_RE.finditer(text):
        pass
    if last is None:
        return None
    rest = text[last.end() :]
    line = ""
    for line in rest.split("\n", 2)[:2]:  # this line, else the next one
        if line.strip().strip("*").strip():
            break
    return _clean_line_answer(line)


def extract_builtin(text: str) -> str | None:
    """The token after the last word ``answer`` (built-in task: ``... answer 7``)."""
    last = None
    for last in _BUILTIN_RE.finditer(text):
        pass
    if last is None:
        return None
    tok = _TOKEN_RE.match(text, last.end())
    if tok is None:
        return None
    return tok.group(1).rstrip(_TRAILING_PUNCT) or None


def _extract_default(text: str) -> str | None:
    for fn in (extract_boxed, extract_answer_colon, extract_builtin):
        ans = fn(text)
        if ans is not None:
            return ans
    return None


def extract_last_number(text: str) -> str | None:
    """The last number in ``text`` (``1,234.5``, ``-3``, ``3/4``); a sentence's final period is not a decimal."""
    last = None
    for last in _NUMBER_RE.finditer(text):
        pass
    return last.group() if last is not None else None


def extract_gsm8k(text: str) -> str | None:
    """GSM8K: the line after the last ``####``, else the default chain, else the last number."""
    last = None
    for last in _HASHES_RE.finditer(text):
        pass
    if last is not None:
        ans = _clean_line_answer(last.group(1))
        if ans:
            return ans
    ans = _extract_default(text)
    return ans if ans is not None else extract_last_number(text)


EXTRACTORS: dict[str, ExtractorFn] = {
    Extractor.BOXED.value: extract_boxed,
    Extractor.ANSWER_COLON.value: extract_answer_colon,
    Extractor.BUILTIN.value: extract_builtin,
    Extractor.GSM8K.value: extract_gsm8k,
    Extractor.LAST_NUMBER.value: extract_last_number,
    Extractor.DEFAULT.value: _extract_default,
}

SOURCE_EXTRACTORS: dict[str, str] = {"gsm8k": Extractor.GSM8K.value, "openai/gsm8k": Extractor.GSM8K.value}
"""Extractors for data sources with a well-known answer format (a configured mapping overrides these)."""


def register_extractor(name: str, fn: ExtractorFn, *, overwrite: bool = False) -> None:
    """Add a user extractor ``fn(text) -> str | None`` under ``name``."""
    if not overwrite and name in EXTRACTORS:
        raise ValueError(f"extractor {name!r} is already registered")
    EXTRACTORS[name] = fn


def get_extractor(name: str) -> ExtractorFn:
    """The extractor registered under ``name``; unknown names list the valid ones."""
    try:
        return EXTRACTORS[str(name.value if isinstance(name, Enum) else name)]
    except KeyError:
        raise ValueError(
            f"unknown extractor {name!r}; valid: {sorted(EXTRACTORS)}"
        ) from None


def extract_answer(text: str, extractor: str = Extractor.DEFAULT.value) -> str | None:
    """Final answer of ``text`` with the named extractor (default chain)."""
    return get_extractor(extractor)(text)


class ExtractorMap:
    """Which extractor to use for each data source.

    ``mapping`` sends a data-source name to an extractor name; sources not in it
    (and ``None``) use ``default``. Names are checked at construction.
    """

    def __init__(
        self,
        mapping: Mapping[str, str] | None = None,
        default: str = Extractor.DEFAULT.value,
    ) -> None:
        self._default = get_extractor(default)
        merged = {**SOURCE_EXTRACTORS, **(mapping or {})}
        self._by_source = {src: get_extractor(name) for src, name in merged.items()}

    def for_source(self, data_source: str | None) -> ExtractorFn:
        """The extractor function for ``data_source``."""
        if data_source is None:
            return self._default
        return self._by_source.get(data_source, self._default)

    def extract(self, text: str, data_source: str | None = None) -> str | None:
        """Final answer of ``text`` using the extractor mapped to ``data_source``."""
        return self.for_source(data_source)(text)
