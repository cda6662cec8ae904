"""`openrlhf.utils.extract_boxed_answer` and `grade_answer` without OpenRLHF installed.

Each verdict below is what OpenRLHF's own `math_utils` decides for the pair (checked against
it); the marked pairs are ones where math-verify, the `math` env's grader, decides the other
way, and the stand-in must still decide as OpenRLHF does.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from agenthub.envs import _openrlhf
from agenthub.envs._openrlhf_math import extract_boxed_answer, grade_answer

MATH_VERIFY_DIFFERS = True

# (given, ground truth, OpenRLHF's verdict, whether math-verify decides otherwise)
CORPUS = [
    ("5", "5", True, False),
    ("5.0", "5", True, False),
    ("05", "5", True, False),
    ("5", "6", False, False),
    ("- 3", "-3", True, False),
    ("\\frac{1}{2}", "0.5", True, False),
    ("\\dfrac{1}{2}", "\\frac12", True, False),
    ("1/2", "\\frac{1}{2}", True, False),
    ("0.5", "1/2", True, False),
    (".5", "0.5", True, False),
    ("\\tfrac{3}{4}", "0.75", True, False),
    ("-\\frac{1}{2}", "-0.5", True, False),
    ("1.5", "\\frac{3}{2}", True, False),
    ("1,000", "1000", True, False),
    ("\\$1,234.50", "1234.5", True, False),
    ("10\\%", "10", True, False),
    ("\\$5", "5", True, False),
    ("5 cm", "5", True, False),
    ("5\\text{ cm}", "5", True, False),
    ("3 hours", "3", True, False),
    ("7 inches", "7", True, False),
    ("90^\\circ", "90", True, False),
    ("90^{\\circ}", "90", True, False),
    ("x=3", "3", True, False),
    ("y = 3", "3", True, False),
    ("\\text{(B)}", "(B)", True, False),
    ("(1,2)", "(1, 2)", True, False),
    ("\\left(1,2\\right)", "(1,2)", True, False),
    ("(1,2)", "[1,2]", False, False),
    ("(1,2]", "(1,2)", False, False),
    ("(2,1)", "(1,2)", False, False),
    ("3 and 4", "3, 4", True, False),
    ("\\sqrt{2}", "\\sqrt2", True, False),
    ("\\sqrt{8}", "2\\sqrt{2}", True, False),
    ("2\\pi", "\\pi \\cdot 2", True, False),
    ("\\frac{\\pi}{2}", "\\pi/2", True, False),
    ("\\frac{\\sqrt{3}}{2}", "\\sqrt{3}/2", True, False),
    ("\\infty", "\\infty", True, False),
    ("x^2+2x+1", "(x+1)^2", True, False),
    ("2\\frac{1}{2}", "\\frac{5}{2}", True, False),
    ("3.14", "3.140", True, False),
    ("\\pi", "3.14159", False, False),
    ("0.333", "\\frac{1}{3}", False, False),
    ("6", "6.0000001", False, False),
    ("", "5", False, False),
    ("\\sqrt", "2", False, False),
    ("\\frac1", "1", False, False),
    # OpenRLHF and math-verify disagree: a fraction is compared as written, powers and
    # expressions of more than two letters are not simplified, sets are ordered, `10%` is 10.
    ("2/4", "1/2", False, MATH_VERIFY_DIFFERS),
    ("\\frac{2}{4}", "\\frac{1}{2}", False, MATH_VERIFY_DIFFERS),
    ("10%", "0.1", False, MATH_VERIFY_DIFFERS),
    ("1,000,000", "10^6", False, MATH_VERIFY_DIFFERS),
    ("10^{10}", "10000000000", False, MATH_VERIFY_DIFFERS),
    ("2^10", "1024", False, MATH_VERIFY_DIFFERS),
    ("abc=3", "3", False, MATH_VERIFY_DIFFERS),
    ("1,2", "2,1", False, MATH_VERIFY_DIFFERS),
    ("\\{1,2\\}", "\\{2,1\\}", False, MATH_VERIFY_DIFFERS),
    ("x+y+z+w", "w+z+y+x", False, MATH_VERIFY_DIFFERS),
    ("a\\text{ b}\\text{ c}", "a", False, MATH_VERIFY_DIFFERS),
    # ... and the other way: a mixed number is a sum, e-notation a number.
    ("2 1/2", "5/2", True, MATH_VERIFY_DIFFERS),
    ("1e3", "1000", True, MATH_VERIFY_DIFFERS),
]


@pytest.mark.parametrize(("given", "truth", "verdict", "differs"), CORPUS)
def test_grade_answer_decides_as_openrlhf(
    given: str, truth: str, verdict: bool, differs: bool
) -> None:
    assert grade_answer(given, truth) is verdict


def test_grade_answer_of_nothing_is_false() -> None:
    assert grade_answer(None, "5") is False
    assert grade_answer("5", None) is False


@pytest.mark.parametrize(
    ("text", "answer"),
    [
        ("The answer is \\boxed{42}.", "42"),
        ("first \\boxed{\\frac{1}{2}} then \\boxed{3}", "3"),
        ("\\boxed{a{b}c}", "a{b}c"),
        ("x\\boxed{}", ""),
        ("no box", None),
        ("\\boxed {5}", None),
        ("\\fbox{5}", None),
        ("\\boxed{unclosed", None),
        ("\\boxed{x} \\boxed", None),
    ],
)
def test_extract_boxed_answer_takes_the_last_box(text: str, answer: str | None) -> None:
    assert extract_boxed_answer(text) == answer


def test_the_stand_in_serves_openrlhf_utils(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [m for m in sys.modules if m.partition(".")[0] == "openrlhf"]:
        monkeypatch.delitem(sys.modules, name)
    _openrlhf.install(agent=False)
    from openrlhf.utils import extract_boxed_answer as extract
    from openrlhf.utils import grade_answer as grade

    assert grade(extract("so \\boxed{\\dfrac{1}{2}}"), "0.5")
    assert "openrlhf.utils.agent" not in sys.modules, "reward files get no agent classes"
    _openrlhf.install()
    from openrlhf.utils.agent import AgentInstanceBase  # noqa: F401

    for name in [m for m in sys.modules if m.partition(".")[0] == "openrlhf"]:
        monkeypatch.delitem(sys.modules, name)


def test_openrlhf_math_example_is_the_unmodified_file(fixtures: Path) -> None:
    text = (fixtures / "openrlhf_math_reward_func.py").read_text(encoding="utf-8")
    assert text.startswith('"""Math reward function for verifying mathematical answers.')
    assert "from openrlhf.utils import extract_boxed_answer, grade_answer" in text
