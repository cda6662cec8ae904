"""The built-in procedural tasks: small Python exercises with tests, seeded and split.

Families: arithmetic on an argument, list sums, maxima, counts and filters, string
transforms, and stdin/stdout programs. Each task's parameters are hashed into a split, so
`train` and `held_out` never share a task. Every task carries `metadata["reference"]`: a
correct reply (the code in a ```python block), usable as a supervised demonstration, and
`metadata["mistake"]`: the same reply with a beginner's mistake that fails the tests (a function
that prints its result instead of returning it; a program that reads its two numbers from two
lines instead of one). The default model's warm start shows the mistake in a share of its
demonstrations, so the warm-started model makes it about that often: a flaw RL must remove.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from agenthub._types import Task
from agenthub.envs.code_exec._harness import FunctionTests, IOCase, IOTests

__all__ = ["SPLITS", "generate_tasks"]

SPLITS = ("train", "held_out")
HELD_OUT_PERCENT = 20
ANSWER = "Answer with the code in a ```python block."


@dataclass(frozen=True)
class _Exercise:
    family: str
    key: str
    prompt: str
    label: FunctionTests | IOTests
    code: str
    mistake: str


def _function(
    family: str,
    name: str,
    params: tuple[Any, ...],
    signature: str,
    what: str,
    body: str,
    fn: Callable[..., Any],
    inputs: list[tuple[Any, ...]],
) -> _Exercise:
    calls = [f"{name}({', '.join(repr(a) for a in args)})" for args in inputs]
    tests = tuple(f"assert {c} == {fn(*args)!r}" for c, args in zip(calls, inputs, strict=True))
    prompt = (
        f"Write a Python function `{name}({signature})` that {what}.\n"
        f"For example, `{calls[0]}` should return `{fn(*inputs[0])!r}`.\n{ANSWER}"
    )
    code = f"def {name}({signature}):\n    return {body}\n"
    mistake = f"def {name}({signature}):\n    print({body})\n"
    label = FunctionTests(entry_point=name, tests=tests)
    return _Exercise(family, f"{family}:{name}:{params}", prompt, label, code, mistake)


def _ints(rng: random.Random, n: int, lo: int = -9, hi: int = 20) -> list[int]:
    return [rng.randint(lo, hi) for _ in range(n)]


def _lists(rng: random.Random) -> list[tuple[Any, ...]]:
    return [(_ints(rng, rng.randint(1, 6)),) for _ in range(4)]


def _words(rng: random.Random) -> list[tuple[Any, ...]]:
    letters = "abcdeilmnorst"
    return [("".join(rng.choice(letters) for _ in range(rng.randint(2, 8))),) for _ in range(4)]


def _arithmetic(rng: random.Random) -> _Exercise:
    a, b = rng.randint(2, 9), rng.randint(1, 20)
    name = rng.choice(["f", "compute", "transform"])
    inputs = [(x,) for x in _ints(rng, 4)]
    kind = rng.randrange(3)
    if kind == 0:
        what, body = f"returns x times {a} plus {b}", f"x * {a} + {b}"
        return _function("arith", name, (0, a, b), "x", what, body, lambda x: x * a + b, inputs)
    if kind == 1:
        what, body = f"returns x squared minus {b}", f"x * x - {b}"
        return _function("arith", name, (1, b), "x", what, body, lambda x: x * x - b, inputs)
    what, body = f"returns the remainder of x divided by {a}", f"x % {a}"
    return _function("arith", name, (2, a), "x", what, body, lambda x: x % a, inputs)


def _list_task(rng: random.Random) -> _Exercise:
    k = rng.randint(0, 9)
    name = rng.choice(["g", "process", "summarize"])
    inputs = _lists(rng)
    choices: list[tuple[str, str, Callable[[list[int]], Any]]] = [
        ("returns the sum of the numbers in the list xs", "sum(xs)", sum),
        ("returns the largest number in the list xs", "max(xs)", max),
        ("returns the smallest number in the list xs", "min(xs)", min),
        (
            f"returns how many numbers in the list xs are greater than {k}",
            f"sum(1 for v in xs if v > {k})",
            lambda xs: sum(1 for v in xs if v > k),
        ),
        (
            f"returns the numbers in the list xs that are greater than {k}, in order",
            f"[v for v in xs if v > {k}]",
            lambda xs: [v for v in xs if v > k],
        ),
        (
            f"returns the list xs with every number multiplied by {k}",
            f"[v * {k} for v in xs]",
            lambda xs: [v * k for v in xs],
        ),
        (
            "returns the sum of the even numbers in the list xs",
            "sum(v for v in xs if v % 2 == 0)",
            lambda xs: sum(v for v in xs if v % 2 == 0),
        ),
    ]
    index = rng.randrange(len(choices))
    what, body, fn = choices[index]
    return _function("list", name, (index, k), "xs", what, body, fn, inputs)


def _ends(s: str) -> str:
    return s[0] + s[-1]


def _string_task(rng: random.Random) -> _Exercise:
    k = rng.randint(2, 4)
    c, d = rng.sample("aeiost", 2)
    name = rng.choice(["h", "convert", "text_op"])
    inputs = _words(rng)
    choices: list[tuple[str, str, Callable[[str], Any]]] = [
        ("returns the string s reversed", "s[::-1]", lambda s: s[::-1]),
        ("returns the string s in upper case", "s.upper()", str.upper),
        (f"returns the string s repeated {k} times", f"s * {k}", lambda s: s * k),
        (
            f"returns how many times the letter {c!r} appears in the string s",
            f"s.count({c!r})",
            lambda s: s.count(c),
        ),
        (
            f"returns the string s with every {c!r} replaced by {d!r}",
            f"s.replace({c!r}, {d!r})",
            lambda s: s.replace(c, d),
        ),
        ("returns the length of the string s", "len(s)", len),
        (
            "returns the first and last characters of s joined",
            "s[0] + s[-1]",
            lambda s: s[0] + s[-1],
        ),
    ]
    index = rng.randrange(len(choices))
    what, body, fn = choices[index]
    return _function("string", name, (index, k, c, d), "s", what, body, fn, inputs)


def _io_task(rng: random.Random) -> _Exercise:
    ops: list[tuple[str, str, Callable[[int, int], int]]] = [
        ("sum", "a + b", lambda a, b: a + b),
        ("product", "a * b", lambda a, b: a * b),
        ("difference (the first minus the second)", "a - b", lambda a, b: a - b),
        ("maximum", "max(a, b)", max),
    ]
    index = rng.randrange(len(ops))
    what, expr, fn = ops[index]
    pairs = [(rng.randint(-20, 50), rng.randint(-20, 50)) for _ in range(4)]
    cases = tuple(IOCase(stdin=f"{a} {b}\n", stdout=f"{fn(a, b)}\n") for a, b in pairs)
    prompt = (
        "Write a Python program that reads two integers from standard input, on one line "
        f"separated by a space, and prints their {what}.\n"
        f"For example, for the input `{pairs[0][0]} {pairs[0][1]}` it prints "
        f"`{fn(*pairs[0])}`.\n{ANSWER}"
    )
    code = f"a, b = map(int, input().split())\nprint({expr})\n"
    mistake = f"a = int(input())\nb = int(input())\nprint({expr})\n"
    key = f"io:{index}:{pairs}"
    return _Exercise("io", key, prompt, IOTests(cases=cases), code, mistake)


_FAMILIES = (_arithmetic, _list_task, _string_task, _io_task)


def _split_of(key: str) -> str:
    bucket = int.from_bytes(hashlib.sha256(key.encode()).digest()[:4], "big") % 100
    return "held_out" if bucket < HELD_OUT_PERCENT else "train"


def generate_tasks(split: str = "train", n: int = 1000, *, seed: int = 0) -> Iterator[Task]:
    """`n` tasks of `split` (`train` or `held_out`), the same for the same seed everywhere."""
    if split not in SPLITS:
        raise ValueError(f"code_exec has built-in splits {SPLITS}, not {split!r}")
    rng = random.Random(f"agenthub-code-exec:{seed}:{split}")
    made = 0
    while made < n:
        exercise = rng.choice(_FAMILIES)(rng)
        # A task's key (its parameters, not its test inputs) decides its split.
        if _split_of(exercise.key) != split:
            continue
        yield Task(
            id=f"code-{split}-{seed}-{made}",
            prompt=exercise.prompt,
            label=exercise.label.model_dump(mode="json"),
            metadata={
                "family": exercise.family,
                "reference": f"```python\n{exercise.code}```",
                "mistake": f"```python\n{exercise.mistake}```",
            },
        )
        made += 1
