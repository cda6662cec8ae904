"""The built-in procedural math tasks: arithmetic, fractions and linear equations.

Seeded and deterministic: the same `(split, seed, index)` always gives the same task, and a
problem belongs to exactly one split (decided by a stable hash of its text), so `held_out`
never repeats a `train` problem. Numbers are small on purpose: a tiny model warm-started on the
`metadata["reference"]` demonstrations can solve a good share, which leaves RL room to improve.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from fractions import Fraction

import numpy as np

from agenthub._types import Task

INSTRUCTION = "Put the final answer in \\boxed{}."

SPLITS = ("train", "held_out")
_HELD_OUT_SHARE = 8  # one problem in eight belongs to held_out

Problem = tuple[str, str, str]
"""(question, answer as LaTeX, reference solution ending in \\boxed{answer})."""


def _latex(value: Fraction) -> str:
    if value.denominator == 1:
        return str(value.numerator)
    sign = "-" if value < 0 else ""
    return f"{sign}\\frac{{{abs(value.numerator)}}}{{{value.denominator}}}"


def _plain(value: Fraction) -> str:
    return str(value.numerator) if value.denominator == 1 else f"{value}"


def _reduce(numerator: int, denominator: int) -> str:
    """`n/d`, followed by its lowest terms when they differ: `6/8 = 3/4`, `3/4`, `8/4 = 2`."""
    value = _plain(Fraction(numerator, denominator))
    written = f"{numerator}/{denominator}"
    return written if value == written else f"{written} = {value}"


def arithmetic(rng: np.random.Generator) -> Problem:
    op = rng.choice(["+", "-", "*", "+*"])
    a, b = (int(x) for x in rng.integers(2, 50, size=2))
    if op == "+":
        answer, work = a + b, f"{a} + {b} = {a + b}."
        question = f"What is {a} + {b}?"
    elif op == "-":
        a, b = max(a, b), min(a, b)
        answer, work = a - b, f"{a} - {b} = {a - b}."
        question = f"What is {a} - {b}?"
    elif op == "*":
        b = int(rng.integers(2, 10))
        answer, work = a * b, f"{a} * {b} = {a * b}."
        question = f"What is {a} * {b}?"
    else:
        c = int(rng.integers(2, 10))
        answer = (a + b) * c
        work = f"{a} + {b} = {a + b}, and {a + b} * {c} = {answer}."
        question = f"What is ({a} + {b}) * {c}?"
    return question, str(answer), f"{work} \\boxed{{{answer}}}"


def fractions(rng: np.random.Generator) -> Problem:
    b, d = (int(x) for x in rng.integers(2, 10, size=2))
    a, c = int(rng.integers(1, b)), int(rng.integers(1, d))
    x, y = Fraction(a, b), Fraction(c, d)
    op = rng.choice(["+", "-", "*"])
    value = x + y if op == "+" else x - y if op == "-" else x * y
    question = f"What is {a}/{b} {op} {c}/{d}? Write the answer as a fraction in lowest terms."
    if op == "*":
        work = f"{a}/{b} * {c}/{d} = {_reduce(a * c, b * d)}."
    else:
        den = b * d // np.gcd(b, d)
        p, q = a * (den // b), c * (den // d)
        raw = p + q if op == "+" else p - q
        work = f"{a}/{b} {op} {c}/{d} = {p}/{den} {op} {q}/{den} = {_reduce(raw, den)}."
    answer = _latex(value)
    return question, answer, f"{work} \\boxed{{{answer}}}"


def linear_equation(rng: np.random.Generator) -> Problem:
    a = int(rng.integers(2, 10))
    x = int(rng.integers(-10, 11))
    b = int(rng.integers(1, 30))
    c = a * x + b
    question = f"Solve for x: {a}x + {b} = {c}."
    work = f"{a}x = {c} - {b} = {c - b}, so x = {c - b} / {a} = {x}."
    return question, str(x), f"{work} \\boxed{{{x}}}"


KINDS: dict[str, Callable[[np.random.Generator], Problem]] = {
    "arithmetic": arithmetic,
    "fractions": fractions,
    "linear_equation": linear_equation,
}


def _split_of(question: str) -> str:
    digest = hashlib.sha256(question.encode()).digest()
    return "held_out" if digest[0] % _HELD_OUT_SHARE == 0 else "train"


def generate_tasks(split: str = "train", *, num_tasks: int = 1000, seed: int = 0) -> Iterator[Task]:
    """`num_tasks` procedural problems of `split` (`train` or `held_out`), cycling the kinds.

    Each task's `label` is the answer in LaTeX, and `metadata["reference"]` is a correct model
    response (short working ending in `\\boxed{answer}`) usable as a supervised demonstration.
    `metadata["mistake"]` is that response hedged with a second, wrong boxed answer, which the
    verifier does not reward: the default model's warm start shows it in a share of its
    demonstrations, a known flaw for RL to learn away.
    """
    if split not in SPLITS:
        raise ValueError(f"the math generator has splits {SPLITS}, not {split!r}")
    rng = np.random.default_rng([seed, SPLITS.index(split)])
    kinds = list(KINDS.items())
    made = misses = 0
    seen: set[str] = set()
    while made < num_tasks:
        kind, generate = kinds[made % len(kinds)]
        question, answer, reference = generate(rng)
        if _split_of(question) != split or question in seen:
            misses += 1
            if misses > 100 * (made + 100):
                raise ValueError(
                    f"the {kind} generator ran out of distinct {split} problems after "
                    f"{made} tasks; ask for fewer tasks"
                )
            continue
        seen.add(question)
        yield Task(
            id=f"{kind}-{split}-{made}",
            prompt=f"{question} {INSTRUCTION}",
            label=answer,
            metadata={
                "kind": kind,
                "reference": reference,
                "mistake": f"{reference} or \\boxed{{{answer} + 1}}",
            },
        )
        made += 1
