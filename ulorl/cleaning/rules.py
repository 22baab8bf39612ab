"""Text heuristics behind the rule-based cleaning steps (pure functions on strings).

The paper names the cleaning steps but not their rules; these heuristics are ours
(see docs/data.md): enumerated sub-question markers and several question marks for
multi-question problems; lettered options with a letter answer for multiple choice;
\\boxed{} / "The answer is" / delimiters for short answers; matrices, long lists and
a character budget for over-long answers.
"""

from __future__ import annotations

import re

# A marker counts when it starts a line or follows sentence punctuation (so f(1)+f(2) or
# the interval [0, 1) are not sub-questions); "(a)"/"(b)" may also follow plain whitespace.
_B = r"(?:^|(?<=[.:;?!\n]))\s*"
_BP = r"(?:^|(?<=[.:;,?!\n]))\s*"
_PART_PAIRS: list[tuple[str, str, str]] = [
    ("(a)/(b)", r"(?:^|(?<=\s)|(?<=[.:;,?!]))[(（]a[)）]\s", r"(?:^|(?<=\s)|(?<=[.:;,?!]))[(（]b[)）]\s"),
    ("(1)/(2)", _BP + r"[(（]1[)）]\s*\S", _BP + r"[(（]2[)）]\s*\S"),
    ("(i)/(ii)", _BP + r"[(（]i[)）]\s*\S", _BP + r"[(（]ii[)）]\s*\S"),
    ("a)/b)", _B + r"a\)\s", _B + r"b\)\s"),
    ("1)/2)", _B + r"1\)\s", _B + r"2\)\s"),
    ("i)/ii)", _B + r"i\)\s", _B + r"ii\)\s"),
    ("Part 1/Part 2", r"\b(?:Part|PART|Question)\s*(?:1|I|A|\(a\))(?![\w])",
     r"\b(?:Part|PART|Question)\s*(?:2|II|B|\(b\))(?![\w])"),
]
_QUESTION_END = re.compile(r"[?？](?=\s|$|[\"')\]])")


def multi_question_reason(question: str) -> str | None:
    """Why `question` looks like several sub-questions, or None."""
    for name, first, second in _PART_PAIRS:
        m1 = re.search(first, question, flags=re.M)
        if m1 and re.search(second, question[m1.end():], flags=re.M):
            return f"enumerated parts {name}"
    if len(_QUESTION_END.findall(question)) >= 2:
        return "several question marks"
    return None


_LETTERS = "ABCDEFGH"
_MARKER_FORMS = {  # same form for every option of a question
    "paren": lambda L: rf"[(（]{L}[)）]",
    "dot": lambda L: rf"(?:^|(?<=[\s:：]))(?<![\w$\\]){L}[.．、:：)]",
}
_REFERS_TO_OPTIONS = re.compile(r"\b(following|options?|choices?|choose|select)\b", re.I)


def parse_choices(question: str, letters: str = _LETTERS) -> tuple[str, dict[str, str], str] | None:
    """Split a lettered multiple-choice question into (stem, {letter: option text}, marker form), or None.

    Options must run A, B, C, ... (or the given `letters`) in order with one marker form ((A) or A. / A) /
    A:); the last option ends at the end of its line. Options are keyed by upper-case letter.
    """
    for form_name, form in _MARKER_FORMS.items():
        spans = []
        pos = 0
        for L in letters:
            m = re.compile(form(L), re.M).search(question, pos)
            if not m:
                break
            spans.append((L, m.start(), m.end()))
            pos = m.end()
        if len(spans) < 2:
            continue
        opts: dict[str, str] = {}
        for j, (L, _, end) in enumerate(spans):
            stop = spans[j + 1][1] if j + 1 < len(spans) else len(question)
            text = question[end:stop]
            if j + 1 == len(spans):
                text = text.split("\n", 1)[0]
            opts[L.upper()] = text.strip().rstrip(";,；，").strip()
        stem = question[: spans[0][1]].strip()
        if stem and all(opts.values()):
            return stem, opts, form_name
    return None


def _unwrap(ans: str) -> str:
    a = last_boxed(ans) or ans
    a = re.sub(r"\\text\{([^{}]*)\}", r"\1", a).replace("$", "").strip()
    return a.strip("().（） ").rstrip(".").strip()


TRUE_FALSE_ANSWERS = {"true", "false", "yes", "no"}
_TF_QUESTION = re.compile(r"true\s+or\s+false|true\s*/\s*false|\(T/F\)|yes\s+or\s+no", re.I)


def choice_conversion(question: str, answer: str) -> tuple[str, str, str] | None:
    """For a choice or true/false question: (action, new_question, new_answer) with action
    'convert' or 'drop:<reason>'; None when the question is not a choice question.

    A question with A./B. options whose answer is neither a letter nor an option text is
    taken as not a choice question (kept); with (A)/(B) options it is dropped.
    """
    if _unwrap(answer).lower() in TRUE_FALSE_ANSWERS or _TF_QUESTION.search(question):
        return "drop:true/false question", question, answer
    parsed = parse_choices(question)
    a = _unwrap(answer)
    lower = re.fullmatch(r"[(（]?([a-h])[)）]?", a)
    if parsed is None and lower:  # "(a) 2 (b) 3" with answer "(a)": lower-case options, only in parentheses
        parsed = parse_choices(question, _LETTERS.lower())
        parsed = parsed if parsed and parsed[2] == "paren" else None
        a = lower.group(1).upper()
    if parsed is None:
        return None
    stem, opts, form = parsed
    m = re.fullmatch(r"([A-H])(?:\s*[.:)：]\s*.*)?", a, flags=re.S)
    if re.fullmatch(r"[A-H](?:(?:\s*(?:,|、|and|&)\s*|\s+)[A-H])+|[A-H]{2,}", a):
        return "drop:several correct options", question, answer
    if m:
        letter = m.group(1)
        if letter not in opts:
            return "drop:answer letter not among the options", question, answer
        new_answer = opts[letter]
    else:
        texts = {o.strip().lower(): o for o in opts.values()}
        hit = next((texts[c] for c in (answer.strip().lower(), a.lower()) if c in texts), None)
        if hit is None:  # "A." markers are weak evidence ("points A. and B."): then not a choice question
            return ("drop:answer matches no option", question, answer) if form == "paren" else None
        new_answer = hit
    if _REFERS_TO_OPTIONS.search(stem):
        return "drop:stem refers to the options", question, answer
    return "convert", stem, new_answer


def last_boxed(text: str) -> str | None:
    """Content of the last \\boxed{...} (or \\fbox{...}) with balanced braces, or None."""
    idx = max(text.rfind("\\boxed{"), text.rfind("\\fbox{"))
    if idx < 0:
        return None
    i = text.index("{", idx) + 1
    depth, j = 1, i
    while j < len(text) and depth:
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        j += 1
    return text[i : j - 1].strip() if depth == 0 else None


_PREFIX = re.compile(r"^(?:so,?\s+|therefore,?\s+|thus,?\s+)?(?:the\s+)?(?:final\s+)?answer\s*(?:is|:|：)\s*", re.I)
_DELIMS = [(r"$$", r"$$"), (r"$", r"$"), (r"\(", r"\)"), (r"\[", r"\]")]


def shorten_answer(answer: str) -> tuple[str, list[str]]:
    """The short final answer and the list of changes made (empty when unchanged)."""
    changes: list[str] = []
    a = answer.strip()
    boxed = last_boxed(a)
    if boxed is not None and boxed != a:
        a, changes = boxed, ["boxed"]
    while True:
        before = a
        if (m := _PREFIX.match(a)) and m.end() < len(a):
            a = a[m.end():].strip()
            changes.append("answer prefix")
        if a.endswith(".") and not a.endswith("..") and len(a) > 1:
            a = a[:-1].rstrip()
            changes.append("trailing period")
        for lo, hi in _DELIMS:
            if len(a) > len(lo) + len(hi) and a.startswith(lo) and a.endswith(hi):
                inner = a[len(lo) : len(a) - len(hi)]
                if lo != "$" or "$" not in inner:
                    a = inner.strip()
                    changes.append("math delimiters")
                    break
        if a == before:
            break
    return a, list(dict.fromkeys(changes))


_MATRIX = re.compile(r"\\begin\{(?:[pbvBV]?matrix|smallmatrix|array)\}")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")


def _wrapped(a: str) -> bool:
    """Whether one bracket pair encloses the whole string."""
    if len(a) < 2 or a[0] not in "([{" or a[-1] not in ")]}":
        return False
    depth = 0
    for i, ch in enumerate(a):
        depth += (ch in "([{") - (ch in ")]}")
        if depth == 0 and i < len(a) - 1:
            return False
    return True


def count_list_items(answer: str) -> int:
    """Top-level items separated by ',' or ';' (one outer bracket pair removed; 1,000 is one number)."""
    a = answer.replace("\\left", "").replace("\\right", "").replace("\\{", "{").replace("\\}", "}")
    a = _THOUSANDS.sub("", a.replace("\\,", "").replace("{,}", ".")).strip()
    if _wrapped(a):
        a = a[1:-1]
    depth, items = 0, 1
    for ch in a:
        depth += (ch in "([{") - (ch in ")]}")
        if ch in ",;" and depth <= 0:
            items += 1
    return items


def long_answer_reason(answer: str, max_chars: int, max_items: int) -> str | None:
    """Why a reference answer is too long to verify reliably, or None."""
    if _MATRIX.search(answer):
        return "matrix or array"
    n = count_list_items(answer)
    if n > max_items:
        return f"list with more than {max_items} items"
    if len(re.sub(r"\s+", "", answer)) > max_chars:
        return f"longer than {max_chars} characters"
    return None
