"""Normalisation of final answers and ground truths before they are compared.

Datasets write ground truths one way ("98 values", "42 dollars", ``1840*n**3``,
"#### 72", "C(10, 5), or equivalently 252"); models write answers another
(``\\boxed{98}``, ``\\$42``, ``1840n^3``, ``\\binom{10}{5}``). Math-verify
already equates most LaTeX forms, so this module only removes what it cannot
see past. Every step is a plain string rewrite, linear in the input (balanced
groups are matched with one scan, regexes cannot backtrack), so it runs in the
trainer process on answers up to ``max_answer_chars``.

:func:`normalize` applies, in order:

1. GSM8K ground truths: the text after the last ``####``;
2. delimiters: ``$...$``, ``\\(...\\)``, ``\\[...\\]``; a whole-answer
   ``\\boxed{...}``;
3. ``\\text{}``, ``\\textbf{}``, ``\\mathrm{}``, ``\\mbox{}`` -> their content;
   LaTeX spacing (``\\,``, ``\\!``, ``\\;``, ``~``), ``\\left``/``\\right``,
   ``\\dfrac``/``\\tfrac`` -> ``\\frac``;
4. money and degrees: ``\\$``, a leading ``$``, ``^\\circ``, ``^{\\circ}``, ``°``;
5. a trailing remark: " (i.e., all values)", "(none of the values)"; a
   trailing period;
6. answer sentences: "X is the only possible value", "... is equal to X",
   "The only possible value for the limit is X";
7. thousands separators in a plain number (``1,000,000``, ``1{,}000``);
8. sympy syntax: ``a**b`` -> ``a^{b}``, ``sqrt(x)`` -> ``\\sqrt{x}``,
   ``pi`` -> ``\\pi``, ``floor(x)`` -> ``\\lfloor x\\rfloor``, ``C(n, k)`` ->
   ``\\binom{n}{k}``, ``oo`` -> ``\\infty``;
9. units and counted nouns after a value: "98 values", "3 integers", "42
   dollars", "12 square units", "30 degrees" -> the value; the words are kept
   apart (:attr:`Normalized.unit`) so that "5 cm" is never equal to "5 m";
10. an answer made only of words ("No", "Yes", "No integer solutions") is
    lower-cased.

:func:`gold_alternatives` splits "X, or equivalently Y" (CHAMP) into the forms
a model may give; "or approximately Y" is dropped (an approximation is not the
answer).

Deviation from verl/lm-eval's ``normalize_final_answer``: we do not delete
arbitrary words or units from inside an expression, and we never drop the
unit when both sides carry different ones.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["Normalized", "gold_alternatives", "normalize", "sympy_to_latex", "units_conflict"]

_TEXT_MACROS = ("\\text", "\\textbf", "\\textit", "\\textrm", "\\mathrm", "\\mathbf", "\\mbox", "\\textnormal",
                "\\operatorname")
_SPACING = re.compile(r"\\[,!;: ]|~")
_LEFT_RIGHT = re.compile(r"\\(?:left|right)(?=[^a-zA-Z])")
_DEGREES = re.compile(r"\^\s*\{?\s*\\circ\s*\}?|°|\\degree")
_TRAILING_REMARK = re.compile(r"\s*\((?:i\.e\.|e\.g\.|that is|none|no |all )[^()]*\)\s*$", re.IGNORECASE)
_ONLY_VALUE = re.compile(r"^(.+?)\s+is\s+the\s+only\s+possible\s+(?:value|answer|solution)s?$", re.IGNORECASE)
_EQUAL_TO = re.compile(r"^[A-Za-z][A-Za-z ]*?\s+is\s+equal\s+to\s+(.+)$")
_ONLY_VALUE_FOR = re.compile(r"^the\s+only\s+possible\s+(?:value|answer)\s+(?:for|of)\s+[A-Za-z ]+?\s+is\s+(.+)$",
                             re.IGNORECASE)
_THOUSANDS = re.compile(r"^([-+]?)(\d{1,3}(?:(?:,|\{,\})\d{3})+)(\.\d+)?$")
_WORDS_ONLY = re.compile(r"^[A-Za-z][A-Za-z' \-]*$")
# a value (no letters, at least one digit) then plain words: "98 values", "27cm"; or a one-letter variable: "n times"
# (words of two letters or more: "2 x" is a product, not a unit)
_NUMBER_THEN_WORDS = re.compile(r"^([^A-Za-z\s\\](?:[^A-Za-z\\]*[^A-Za-z\s\\])?)\s*((?:[A-Za-z][A-Za-z\-]+\s*)+)$")
_LETTER_THEN_WORDS = re.compile(r"^([A-Za-z])\s+((?:[A-Za-z][A-Za-z\-]+\s*)+)$")
# words that change the value or are mathematics, never a unit: "1 million", "2 pi", "3 and 4"
_NOT_UNITS = {"million", "billion", "trillion", "thousand", "hundred", "percent", "half", "halves", "third", "thirds",
              "quarter", "quarters", "and", "or", "to", "of", "over", "plus", "minus", "divided", "squared", "cubed",
              "pi", "sin", "cos", "tan", "log", "ln", "mod", "gcd", "lcm", "exp", "sqrt", "not",
              "no", "none", "infinity", "less", "more", "than", "least", "most", "only", "all", "each", "per"}
_SYMPY_FUNCS = re.compile(r"\b(sqrt|floor|ceiling|ceil|C|binomial|exp)\(")
_PI = re.compile(r"(?<![A-Za-z\\])pi(?![A-Za-z])")
_OO = re.compile(r"(?<![A-Za-z\\])oo(?![A-Za-z])")
_WORD_UNITS = {"degree", "degrees"}  # the unit of "30 degrees" is the same as "30^\circ": dropped on both sides


@dataclass(frozen=True)
class Normalized:
    """An answer ready for comparison: ``text`` and the ``unit`` words stripped after its value ("" if none)."""

    text: str
    unit: str = ""


def _match_group(s: str, start: int, open_ch: str, close_ch: str) -> int:
    """Index of the ``close_ch`` balancing the ``open_ch`` at ``start`` (-1 when unbalanced)."""
    depth = 0
    for i in range(start, len(s)):
        c = s[i]
        if c == open_ch:
            depth += 1
        elif c == close_ch:
            depth -= 1
            if depth == 0:
                return i
    return -1


_MACRO_OPEN = re.compile(r"\\(?:" + "|".join(m[1:] for m in _TEXT_MACROS) + r")\s?\{|[{}]")


def _unwrap_macros(s: str) -> str:
    """``\\text{abc}`` -> ``abc`` for each macro, nested ones too, in one scan with a stack (no recursion)."""
    out, stack, i = [], [], 0
    for m in _MACRO_OPEN.finditer(s):
        out.append(s[i : m.start()])
        tok = m.group()
        if tok == "}":
            if stack.pop() if stack else True:
                out.append("}")
        elif tok == "{":
            stack.append(True)
            out.append("{")
        else:  # a macro's opening brace: dropped with its closing one
            stack.append(False)
        i = m.end()
    out.append(s[i:])
    return "".join(out)


def _strip_delimiters(s: str) -> str:
    s = s.strip()
    for a, b in (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]")):
        if len(s) >= len(a) + len(b) and s.startswith(a) and s.endswith(b) and not s.startswith("\\$"):
            s = s[len(a) : len(s) - len(b)].strip()
    if s.startswith("\\boxed{") and _match_group(s, len("\\boxed"), "{", "}") == len(s) - 1:
        s = s[len("\\boxed{") : -1].strip()
    return s


def sympy_to_latex(s: str) -> str:
    """``1840*n**3`` -> ``1840*n^{3}``, ``sqrt(3)/3`` -> ``\\sqrt{3}/3``, ``2*pi`` -> ``2*\\pi``, ``C(10, 5)`` ->
    ``\\binom{10}{5}``; text without sympy syntax comes back unchanged. ``^(...)`` also becomes ``^{...}``."""
    if "**" in s or "^(" in s:
        s = _power_groups(s.replace("**", "^"))
    if _SYMPY_FUNCS.search(s):
        s = _functions(s)
    s = _PI.sub(r"\\pi ", s)
    return _OO.sub(r"\\infty ", s).strip()


def _power_groups(s: str) -> str:
    """``a^(b+c)`` -> ``a^{b+c}`` and ``a^-2`` / ``a^12`` -> ``a^{-2}`` / ``a^{12}`` (one scan)."""
    out, i = [], 0
    while i < len(s):
        if s[i] == "^" and i + 1 < len(s):
            if s[i + 1] == "(":
                end = _match_group(s, i + 1, "(", ")")
                if end > 0:
                    out.append("^{" + _power_groups(s[i + 2 : end]) + "}")
                    i = end + 1
                    continue
            m = re.compile(r"-?(?:\d+(?:\.\d+)?|[A-Za-z])").match(s, i + 1)
            if m:
                out.append("^{" + m.group() + "}")
                i = m.end()
                continue
        out.append(s[i])
        i += 1
    return "".join(out)


def _functions(s: str) -> str:
    out, i = [], 0
    while True:
        m = _SYMPY_FUNCS.search(s, i)
        if m is None:
            out.append(s[i:])
            return "".join(out)
        open_pos = m.end() - 1
        end = _match_group(s, open_pos, "(", ")")
        if end < 0:
            out.append(s[i:])
            return "".join(out)
        out.append(s[i : m.start()])
        inner = _functions(s[open_pos + 1 : end])
        name = m.group(1)
        if name == "sqrt":
            out.append("\\sqrt{" + inner + "}")
        elif name == "floor":
            out.append("\\lfloor " + inner + " \\rfloor")
        elif name in ("ceiling", "ceil"):
            out.append("\\lceil " + inner + " \\rceil")
        elif name == "exp":
            out.append("e^{" + inner + "}")
        else:  # C(n, k) / binomial(n, k)
            parts = inner.split(",")
            out.append("\\binom{" + parts[0].strip() + "}{" + parts[1].strip() + "}" if len(parts) == 2
                       else m.group(0) + inner + ")")
        i = end + 1


def _singular(word: str) -> str:
    w = word.lower()
    if w.endswith("ies") and len(w) > 4:
        return w[:-3] + "y"
    if w.endswith("s") and not w.endswith("ss") and len(w) > 2:
        return w[:-1]
    return w


_SYMPY_MAX_CHARS = 1000  # the sympy rewrites match nested groups (quadratic at worst): only on short answers


def normalize(s: str) -> Normalized:
    """Canonical form of an answer or a ground truth (see the module docstring for the steps); never raises."""
    try:
        return _normalize(str(s))
    except RecursionError:  # pathologically nested input: compare it as it is
        return Normalized(str(s).strip())


def _normalize(s: str) -> Normalized:
    if "####" in s:
        s = s.rsplit("####", 1)[1]
    s = _strip_delimiters(s)
    s = _unwrap_macros(s)
    s = _SPACING.sub(" ", s)
    s = _LEFT_RIGHT.sub("", s)
    s = s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    s = _DEGREES.sub("", s)
    s = s.replace("\\$", "").replace("\\%", "%").strip()
    if s.startswith("$") and "$" not in s[1:]:
        s = s[1:]
    s = _TRAILING_REMARK.sub("", s).strip().rstrip(".").strip()
    for pattern in (_ONLY_VALUE, _EQUAL_TO, _ONLY_VALUE_FOR):
        m = pattern.match(s)
        if m:
            s = m.group(1).strip()
    m = _THOUSANDS.match(s)
    if m:
        s = m.group(1) + m.group(2).replace("{,}", "").replace(",", "") + (m.group(3) or "")
    if len(s) <= _SYMPY_MAX_CHARS:
        s = sympy_to_latex(s)
    unit = ""
    m = _NUMBER_THEN_WORDS.match(s)
    if m is not None and not any(c.isdigit() for c in m.group(1)):
        m = None
    m = m or _LETTER_THEN_WORDS.match(s)
    if m is not None and not {w.lower() for w in m.group(2).split()} & _NOT_UNITS:
        words = [_singular(w) for w in m.group(2).split()]
        s, unit = m.group(1).strip(), " ".join(w for w in words if w not in _WORD_UNITS)
    if _WORDS_ONLY.match(s):
        s = " ".join(s.lower().split())
    return Normalized(s.strip(), unit)


def units_conflict(a: Normalized, b: Normalized) -> bool:
    """True when both answers carry units and they differ ("5 cm" vs "5 m"); one unit alone is no conflict."""
    return bool(a.unit) and bool(b.unit) and a.unit != b.unit


_ALTERNATIVE = re.compile(r",?\s+or\s+(equivalently|an\s+equivalent\s+form\s+such\s+as|approximately)\s+",
                          re.IGNORECASE)


def gold_alternatives(gold: str) -> list[str]:
    """The forms a ground truth accepts: "C(10, 5), or equivalently 252" -> ["C(10, 5)", "252"].

    "or approximately X" parts are dropped: an approximation does not count as the answer."""
    parts = _ALTERNATIVE.split(str(gold))
    out = [parts[0].strip()]
    for kind, text in zip(parts[1::2], parts[2::2]):
        if not kind.lower().startswith("approx"):
            out.append(text.strip())
    return [p for p in out if p]
