"""Runs the tested code and its tests in a child process of the function harness, which forks
it and calls `main` there.

It never sees an expected value: for the tests the harness can judge itself (`assert CALL ==
LITERAL`, and others whose calls of the tested function it can lift out) it evaluates only
those calls and sends their values back as plain data; any other test runs whole here and is
reported as passed or not. Input: one JSON job on stdin. Output: one JSON line per test on the
stdout it started with; the tested code's own prints go to /dev/null.
"""

from __future__ import annotations

import ast
import json
import os
import signal
import sys
from typing import Any

from harness_common import equality, tail  # type: ignore[import-not-found]


class TestTimeout(BaseException):
    pass


def _alarm(*_: object) -> None:
    raise TestTimeout()


def encode(value: Any) -> Any:
    """`value` as JSON data, for exact built-in types only: a subclass, or an object with an
    `__eq__` of its own, could pass for any expected value."""
    kind = type(value)
    if value is None or kind in (bool, int, float, str):
        return value
    if kind in (list, tuple, set, frozenset):
        return {kind.__name__: [encode(x) for x in value]}
    if kind is dict:
        return {"dict": [[encode(k), encode(x)] for k, x in value.items()]}
    if kind is bytes:
        return {"bytes": value.hex()}
    if kind is complex:
        return {"complex": [value.real, value.imag]}
    raise TypeError(f"returned a {kind.__name__}, which is not a plain Python value")


def _assert_equal(left_side: ast.expr, right_side: ast.expr, ns: dict[str, Any]) -> str | None:
    left = eval(compile(ast.Expression(left_side), "<test>", "eval"), ns)
    right = eval(compile(ast.Expression(right_side), "<test>", "eval"), ns)
    if left == right:
        return None
    return f"{ast.unparse(left_side)} returned {repr(left)[:200]}, expected {repr(right)[:200]}"


def run_test(test: dict[str, Any], ns: dict[str, Any]) -> dict[str, Any]:
    if "calls" in test:
        values = [eval(compile(call, "<test>", "eval"), ns) for call in test["calls"]]
        return {"values": [encode(v) for v in values]}
    tree = ast.parse(test["exec"])
    sides = equality(tree)
    if sides is not None:
        left, right = sides
        error = _assert_equal(left, right, ns)
    else:
        try:
            exec(compile(tree, "<test>", "exec"), ns)
            error = None
        except AssertionError as exc:
            error = "AssertionError" + (f": {exc}" if str(exc) else "")
    return {"passed": error is None, "error": error}


def main() -> None:
    job = json.loads(sys.stdin.read())
    out = os.fdopen(os.dup(1), "w")
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
    sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - for the life of the process

    def send(**record: Any) -> None:
        out.write(json.dumps(record) + "\n")
        out.flush()

    signal.signal(signal.SIGALRM, _alarm)
    limit = float(job["per_test_s"])
    ns: dict[str, Any] = {"__name__": "solution"}
    try:
        signal.setitimer(signal.ITIMER_REAL, limit)
        exec(compile(job["solution"], "solution.py", "exec"), ns)
        exec(job["setup"], ns)
        signal.setitimer(signal.ITIMER_REAL, 0)
    except TestTimeout:
        return send(load_error=f"defining your code took more than {limit} s")
    except BaseException as exc:
        signal.setitimer(signal.ITIMER_REAL, 0)
        return send(load_error=tail(exc))
    if job["entry"] not in ns:
        return send(load_error=f"NameError: your code does not define {job['entry']!r}")
    for test in job["tests"]:
        try:
            signal.setitimer(signal.ITIMER_REAL, limit)
            result = run_test(test, ns)
            signal.setitimer(signal.ITIMER_REAL, 0)
        except TestTimeout:
            result = {"passed": False, "error": f"timed out after {limit} s"}
        except BaseException as exc:
            signal.setitimer(signal.ITIMER_REAL, 0)
            result = {"passed": False, "error": tail(exc)}
        send(test=test["index"], **result)
    return None
