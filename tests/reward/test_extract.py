"""Final-answer extraction on hand-written cases."""

import pytest

from ulorl.reward import extract_answer
from ulorl.reward.extract import ExtractorMap, extract_answer_colon, extract_boxed, extract_builtin, get_extractor


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (r"so the result is \boxed{\frac{1}{2}}.", r"\frac{1}{2}"),  # nested braces kept
        (r"\boxed{\frac{\sqrt{3}}{2}}", r"\frac{\sqrt{3}}{2}"),  # two levels
        (r"first \boxed{3} then corrected: \boxed{4}", "4"),  # last one wins
        (r"\boxed{5} and later an unclosed \boxed{6", "5"),  # unclosed last box skipped
        (r"\boxed 7", "7"),  # brace-less form
        (r"\fbox{8}", "8"),
        (r"$\boxed { x^2+1 }$", "x^2+1"),
        (r"\boxed{}", ""),  # empty box: found but empty
        ("no box here", None),
    ],
)
def test_boxed(text, expected):
    assert extract_boxed(text) == expected


def test_boxed_deep_nesting_is_linear():
    depth = 200_000
    text = r"\boxed{" + "{" * depth + "1" + "}" * depth + "}"
    assert extract_boxed(text) == "{" * depth + "1" + "}" * depth


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Reasoning...\nAnswer: 42", "42"),
        ("Answer: 1\nwait, recheck.\nFinal Answer: $\\frac{3}{4}$.", "\\frac{3}{4}"),  # last wins, $ and . stripped
        ("**Answer:** 12", "12"),
        ("answer:\n  -5\n", "-5"),  # answer on the next line
        ("nothing", None),
    ],
)
def test_answer_colon(text, expected):
    assert extract_answer_colon(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("3 plus 4 gives 7 so answer 7", "7"),  # built-in task format
        ("answer 3 ... no, answer 12.", "12"),  # last `answer` wins, period stripped
        ("the answer", None),  # nothing after the last `answer`
        ("no final word", None),
    ],
)
def test_builtin(text, expected):
    assert extract_builtin(text) == expected


def test_default_chain_order():
    # boxed beats Answer: beats builtin
    assert extract_answer(r"Answer: 1 ... \boxed{2} ... answer 3") == "2"
    assert extract_answer("answer 3 ... Answer: 1") == "1"
    assert extract_answer("steps ... answer 7") == "7"
    assert extract_answer("I could not solve it.") is None


def test_extractor_map_per_source():
    m = ExtractorMap({"synthetic": "builtin"})
    text = r"\boxed{1} ... answer 9"
    assert m.extract(text, "synthetic") == "9"  # mapped source uses its extractor
    assert m.extract(text, "gsm8k") == "1"  # others use the default chain
    assert m.extract(text, None) == "1"


def test_unknown_extractor_lists_valid_names():
    with pytest.raises(ValueError, match="boxed"):
        get_extractor("nope")
    with pytest.raises(ValueError, match="unknown extractor"):
        ExtractorMap({"src": "nope"})
