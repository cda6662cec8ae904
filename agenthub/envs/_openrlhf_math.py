"""Stand-ins for `openrlhf.utils.extract_boxed_answer` and `grade_answer`.

OpenRLHF's `examples/python/math_reward_func.py` imports these two from `openrlhf.utils`
(its `math_utils`, after the MATH benchmark's and PRM800K's graders). They decide as
OpenRLHF's do: an answer is right when, after the MATH answer clean-up (`\\left`, `\\dfrac`,
units in `\\text{ }`, `0.5`, `a/b`, `x=`), the two strings are the same, or when, after a
looser normalisation (LaTeX to text with pylatexenc, units, `%`, `$`, thousands' commas,
`million`, mixed numbers such as `2 1/2`), they are the same string, or tuples/intervals of the
same brackets whose elements sympy simplifies to the same value (fractions `a/b` compare as
written; an integer never equals a non-integer).

Where math-verify (what the `math` env grades with) decides differently, these follow
OpenRLHF: a percentage equals its number (`10\\%` and `10`), a unit is dropped (`5 cm` and
`5`), a short left-hand side is dropped (`x=3` and `3`), `2 1/2` is `5/2`, `1,000` is `1000`;
a fraction written out is only equal to itself (`2/4` is not `1/2`); an interval's brackets
must match (`(1,2]` is not `(1,2)`), and the answer must be inside `\\boxed{...}`.
"""

from __future__ import annotations

import re
import signal
import threading
from typing import Any

__all__ = ["extract_boxed_answer", "grade_answer"]

SYMPY_TIMEOUT_S = 120
"""How long sympy may simplify one difference (in the main thread, where a signal can stop
it), as in OpenRLHF."""


def extract_boxed_answer(solution: str) -> str | None:
    """What the last `\\boxed{...}` of `solution` holds (braces balanced), or None."""
    start = solution.rfind("\\boxed")
    if start < 0 or not solution.startswith("\\boxed{", start):
        return None
    depth = 0
    for end in range(start + len("\\boxed"), len(solution)):
        depth += {"{": 1, "}": -1}.get(solution[end], 0)
        if depth == 0:
            return solution[start + len("\\boxed{") : end]
    return None


def grade_answer(given_answer: str | None, ground_truth: str | None) -> bool:
    """Whether `given_answer` (already taken out of `\\boxed{}`) is `ground_truth`."""
    if given_answer is None or ground_truth is None:
        return False
    given, truth = str(given_answer), str(ground_truth)
    return _mathd_clean(given) == _mathd_clean(truth) or _equal_after_normalising(given, truth)


# -- The MATH benchmark's answer clean-up ------------------------------------------------------

_TEXT_WRAPPER = re.compile(r"^\\text\{(?P<text>.+?)\}$")

_MATHD_DELETIONS = ("\\left", "\\right", "^{\\circ}", "^\\circ", "\\$")


def _mathd_clean(answer: str) -> str:
    answer = answer.strip()
    wrapped = _TEXT_WRAPPER.search(answer)
    if wrapped:
        answer = wrapped["text"].strip()
    try:
        return _mathd_canonical(answer)
    except (ValueError, IndexError):  # a malformed \frac, \sqrt or units: compared as is
        return answer


def _mathd_canonical(s: str) -> str:
    s = s.replace("\n", "").replace("\\!", "").replace("\\\\", "\\")
    s = s.replace("tfrac", "frac").replace("dfrac", "frac")
    for piece in _MATHD_DELETIONS:
        s = s.replace(piece, "")
    if "\\text{ " in s:  # a unit after the number
        s, _unit = s.split("\\text{ ")  # two units: ValueError
    s = s.replace("\\%", "").replace(" .", " 0.").replace("{.", "{0.")
    if not s:
        return s
    if s.startswith("."):
        s = "0" + s
    sides = s.split("=")
    if len(sides) == 2 and len(sides[0]) <= 2:
        s = sides[1]
    s = _brace_sqrt_arguments(s).replace(" ", "")
    s = _brace_frac_arguments(s)
    if s == "0.5":
        s = "\\frac{1}{2}"
    return _slash_to_frac(s)


def _brace_sqrt_arguments(s: str) -> str:
    head, *rest = s.split("\\sqrt")
    parts = [head]
    for tail in rest:
        parts.append(tail if tail[0] == "{" else "{" + tail[0] + "}" + tail[1:])
    return "\\sqrt".join(parts)


def _brace_frac_arguments(s: str) -> str:
    head, *rest = s.split("\\frac")
    out = head
    for tail in rest:
        if tail[0] == "{":
            out += "\\frac" + tail
            continue
        if len(tail) < 2:
            return s
        numerator, denominator, after = tail[0], tail[1], tail[2:]
        if denominator == "{":
            out += "\\frac{" + numerator + "}{" + after
        else:
            out += "\\frac{" + numerator + "}{" + denominator + "}" + after
    return out


def _slash_to_frac(s: str) -> str:
    parts = s.split("/")
    if len(parts) == 2 and all(re.fullmatch(r"-?\d+", p) for p in parts):
        a, b = (int(p) for p in parts)
        if s == f"{a}/{b}":
            return "\\frac{" + str(a) + "}{" + str(b) + "}"
    return s


# -- The looser normalisation and sympy ---------------------------------------------------------

_UNITS = (
    "degree|cm|centimeter|meter|mile|second|minute|hour|day|week|month|year|foot|feet|inch|yard"
)
_UNIT_PATTERNS = [re.compile(rf"{unit}(es)?(s)? *(\^[0-9]+)?") for unit in _UNITS.split("|")]
_WORDS = (
    ("\\%", "%"),
    ("\\$", "$"),
    ("$", ""),
    ("%", ""),
    (" or ", " , "),
    (" and ", " , "),
    ("million", "*10^6"),
    ("billion", "*10^9"),
    ("trillion", "*10^12"),
)
_UNICODE = (  # what pylatexenc writes for \sqrt, \pi, \infty, \cup, \cdot and \times
    ("\N{SQUARE ROOT}", "sqrt"),
    ("\N{GREEK SMALL LETTER PI}", "pi"),
    ("\N{INFINITY}", "inf"),
    ("\N{UNION}", "U"),
    ("\N{MIDDLE DOT}", "*"),
    ("\N{MULTIPLICATION SIGN}", "*"),
)
_THOUSANDS = re.compile(r"(\d)(,)(\d\d\d)($|\D)")
_FRACTION = re.compile(r"^-?[0-9]+.?/0*[1-9][0-9]*.?$")
_TUPLE_BRACKETS = "()[]"


def _equal_after_normalising(given: str, truth: str) -> bool:
    truth_n, given_n = _normalise(truth), _normalise(given)
    if truth_n == given_n:
        return True
    if not given_n:
        return False
    truth_parts, given_parts = _elements(truth_n), _elements(given_n)
    if len(truth_parts) > 1 and (truth_n[0] != given_n[0] or truth_n[-1] != given_n[-1]):
        return False  # a tuple or an interval whose brackets differ
    if len(truth_parts) != len(given_parts):
        return False
    return all(_elements_equal(t, g) for t, g in zip(truth_parts, given_parts, strict=True))


def _elements_equal(truth: str, given: str) -> bool:
    if _FRACTION.search(truth) and _FRACTION.search(given):
        return truth == given
    if _is_integer_text(truth) != _is_integer_text(given):
        return False
    return _sympy_equal(truth, given)


def _normalise(expr: str) -> str:
    wrapped = _TEXT_WRAPPER.search(expr)
    if wrapped:
        expr = wrapped["text"]
    for old, new in _WORDS:
        expr = expr.replace(old, new)
    for unit in _UNIT_PATTERNS:  # one after the other: removing one can complete another
        expr = unit.sub("", expr)
    expr = re.sub(r"\^ *\\circ", "", expr)
    if expr[:1] == "{" and expr[-1:] == "}":
        expr = expr[1:-1]
    expr = re.sub(r",\\! *", "", expr)
    number = _float_or_none(expr)
    if number is not None and _is_integral(number):
        expr = str(round(number))
    if "\\" in expr:
        expr = _latex_to_text(expr)
    expr = re.sub(r"- *", "-", expr)
    expr = re.sub(r"([0-9]) +([0-9])", r"\1+\2", expr)  # a mixed number: 2 1/2 is 2+1/2
    expr = expr.replace(" ", "").replace("{", "").replace("}", "").lower()
    if _is_integer_text(expr):
        expr = str(int(float(expr.replace(",", ""))))
    return expr


def _latex_to_text(expr: str) -> str:
    from pylatexenc.latex2text import LatexNodes2Text

    latex = expr
    for old, new in (("\\tfrac", "\\frac"), ("\\dfrac", "\\frac"), ("\\frac", " \\frac")):
        latex = latex.replace(old, new)
    try:
        text = LatexNodes2Text().latex_to_text(latex)
    except Exception:  # pylatexenc's parse errors have no common base; the text stays
        return expr
    for old, new in _UNICODE:
        text = text.replace(old, new)
    return str(text).strip()


def _float_or_none(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _is_integral(number: float) -> bool:
    try:
        return abs(number - round(number)) <= 1e-7
    except (OverflowError, ValueError):  # inf, nan
        return False


def _without_thousands_commas(expr: str) -> str:
    while True:
        stripped = _THOUSANDS.sub(r"\1\3\4", expr)
        if stripped == expr:
            return stripped
        expr = stripped


def _is_integer_text(text: str) -> bool:
    number = _float_or_none(_without_thousands_commas(text))
    return number is not None and _is_integral(number)


def _elements(expr: str) -> list[str]:
    """A tuple or interval's elements (one level, brackets of any kind), else the whole."""
    expr = _without_thousands_commas(expr)
    if not expr:
        return []
    inner = expr[1:-1]
    if (
        len(expr) > 2
        and expr[0] in _TUPLE_BRACKETS
        and expr[-1] in _TUPLE_BRACKETS
        and not any(ch in inner for ch in _TUPLE_BRACKETS)
    ):
        return [part.strip() for part in inner.split(",")]
    return [expr]


def _evaluable(expr: str) -> bool:
    letters = {ch for ch in expr.replace("sqrt", "").replace("frac", "") if ch.isalpha()}
    if len(letters) > 2 or "^{" in expr or "^(" in expr:
        return False
    return not re.search(r"\^[0-9]+\^|\^[0-9][0-9]+", expr)


class _Timeout(Exception):
    pass


def _sympy_equal(truth: str, given: str) -> bool:
    difference = f"({truth})-({given})"
    if not _evaluable(difference):
        return False
    try:
        return _simplifies_to_zero(difference)
    except Exception:  # sympy's parser and simplifier raise many kinds: not equal
        return False


def _simplifies_to_zero(difference: str) -> bool:
    import sympy
    from sympy.parsing import sympy_parser

    transformations = (
        *sympy_parser.standard_transformations,
        sympy_parser.implicit_multiplication_application,
    )
    parsed = sympy_parser.parse_expr(difference.replace("^", "**"), transformations=transformations)
    if threading.current_thread() is not threading.main_thread():
        return bool(sympy.simplify(parsed) == 0)

    def _stop(signum: int, frame: Any) -> None:
        raise _Timeout

    previous = signal.signal(signal.SIGALRM, _stop)
    signal.alarm(SYMPY_TIMEOUT_S)
    try:
        return bool(sympy.simplify(parsed) == 0)
    except _Timeout:
        return False
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
