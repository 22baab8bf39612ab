"""The rule-based cleaning heuristics on hand-made questions and answers."""

from __future__ import annotations

import pytest

from ulorl.cleaning.rules import (choice_conversion, count_list_items, last_boxed, long_answer_reason,
                                  multi_question_reason, shorten_answer)


@pytest.mark.parametrize("q", [
    "Find (a) the area and (b) the perimeter.",
    "Let f(x)=x^2. (1) Find f(2); (2) find the minimum.",
    "Solve.\n1) x+1=2\n2) y=3",
    "Given x.\ni) Find x.\nii) Find y.",
    "Part 1: compute x. Part 2: compute y.",
    "Part I asks for x and Part II for y.",
    "What is x? What is y?",
])
def test_multi_question_detected(q):
    assert multi_question_reason(q) is not None


@pytest.mark.parametrize("q", [
    "Find f(1)+f(2).",
    "Is x in [0, 1) or in [1, 2) when x = 1.5?",
    "Using equations (1) and (2), find x.",
    "What is 2+2? Give an integer.",
    "Compute the sum of the roots.",
])
def test_single_question_kept(q):
    assert multi_question_reason(q) is None


@pytest.mark.parametrize("q, a, expected", [
    ("What is 2+2?\nA. 3\nB. 4\nC. 5\nD. 6", "B", ("convert", "What is 2+2?", "4")),
    ("Then x = ( ) (A) 1 (B) 2 (C) 3", "(C)", ("convert", "Then x = ( )", "3")),
    ("x = ? A. 1 B. 2", "\\boxed{B}", ("convert", "x = ?", "2")),
    ("x = ? A. 10 B. 20", "20", ("convert", "x = ?", "20")),  # answer already the option text
])
def test_choice_converted(q, a, expected):
    assert choice_conversion(q, a) == expected


@pytest.mark.parametrize("q, a, reason", [
    ("Which of the following is prime? A. 4 B. 5", "B", "drop:stem refers to the options"),
    ("Pick all that apply. (A) 1 (B) 2 (C) 3", "A, C", "drop:several correct options"),
    ("x = (A) 1 (B) 2", "E", "drop:answer letter not among the options"),
    ("x = (A) 1 (B) 2", "7", "drop:answer matches no option"),
    ("Is 7 prime?", "Yes", "drop:true/false question"),
    ("True or false: 2 is even.", "T", "drop:true/false question"),
])
def test_choice_dropped(q, a, reason):
    assert choice_conversion(q, a)[0] == reason


def test_not_a_choice_question():
    assert choice_conversion("Compute 1+1.", "2") is None
    assert choice_conversion("Points A. and B. are 3 apart. Find AB.", "3") is None  # weak A./B. markers


@pytest.mark.parametrize("a, short, changes", [
    ("The solution is \\boxed{\\frac{1}{2}}.", "\\frac{1}{2}", ["boxed"]),
    ("\\boxed{x^{2}}", "x^{2}", ["boxed"]),
    ("The answer is $\\frac{1}{2}$.", "\\frac{1}{2}", ["answer prefix", "trailing period", "math delimiters"]),
    ("Answer: 7", "7", ["answer prefix"]),
    ("\\(3\\sqrt{2}\\)", "3\\sqrt{2}", ["math delimiters"]),
    ("3.5", "3.5", []),
    ("$a$ and $b$", "$a$ and $b$", []),
])
def test_shorten_answer(a, short, changes):
    assert shorten_answer(a) == (short, changes)


def test_last_boxed_balanced_braces():
    assert last_boxed("first \\boxed{1} then \\boxed{\\frac{a}{b}} end") == "\\frac{a}{b}"
    assert last_boxed("\\boxed{unclosed") is None and last_boxed("none") is None


@pytest.mark.parametrize("a, n", [("1, 2, 3", 3), ("(1, 2)", 2), ("1,000,000", 1), ("f(1, 2), 3", 2),
                                  ("\\{1, 2, 3, 4\\}", 4), ("x", 1)])
def test_count_list_items(a, n):
    assert count_list_items(a) == n


@pytest.mark.parametrize("a, reason", [
    ("\\begin{pmatrix} 1 & 2 \\\\ 3 & 4 \\end{pmatrix}", "matrix or array"),
    ("1, 2, 3, 4, 5, 6", "list with more than 5 items"),
    ("x" * 65, "longer than 64 characters"),
    ("\\frac{1}{2}", None),
    ("1, 2, 3, 4, 5", None),
])
def test_long_answer_reason(a, reason):
    assert long_answer_reason(a, max_chars=64, max_items=5) == reason
