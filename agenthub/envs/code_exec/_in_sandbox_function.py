"""The function-test harness (`main.py` in the sandbox): assert-style tests of a named function.

The tested code runs in a child process (`runner.py`) that never sees an expected value. For
a test `assert CALL == LITERAL` the child sends back CALL's value as plain data and this
process compares it with the literal, so neither patching the harness, forging report lines
nor returning an object that equals everything can pass such a test. Any other test form
(`assert f(x)`, `math.isclose`, several statements) runs whole in the child, which says
whether it passed.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from typing import Any

from harness_common import (  # type: ignore[import-not-found]
    Report,
    equality,
    harden,
    read_job,
    reporter,
)


def literal_check(test: str) -> tuple[str, Any] | None:
    """(CALL source, expected value) for `assert CALL == LITERAL`, else None."""
    try:
        tree = ast.parse(test)
    except SyntaxError:
        return None
    sides = equality(tree)
    if sides is None:
        return None
    left, right = sides
    try:
        expected = ast.literal_eval(right)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None
    return ast.unparse(left), expected


def decode(data: Any) -> Any:
    """The inverse of the runner's `encode`."""
    if not isinstance(data, dict):
        return data
    ((kind, items),) = data.items()
    if kind == "dict":
        return {decode(k): decode(x) for k, x in items}
    if kind == "bytes":
        return bytes.fromhex(items)
    if kind == "complex":
        return complex(*items)
    containers: dict[str, Any] = {"list": list, "tuple": tuple, "set": set, "frozenset": frozenset}
    return containers[kind](decode(x) for x in items)


def judge(call: str, expected: Any, record: dict[str, Any]) -> str | None:
    """None when the child's value for `call` equals `expected`, else what went wrong."""
    if "value" not in record:
        return str(record.get("error") or f"{call} did not return")
    try:
        value = decode(record["value"])
    except (ValueError, TypeError, KeyError) as exc:
        return f"{call} returned something unreadable ({exc})"
    if value == expected:
        return None
    return f"{call} returned {repr(value)[:200]}, expected {repr(expected)[:200]}"


def run_child(config: dict[str, Any], checks: list[tuple[str, Any] | None]) -> bytes:
    job = {
        "solution": config["solution"],
        "setup": config["setup"],
        "entry": config["entry"],
        "per_test_s": config["per_test_s"],
        "tests": [
            {"index": i, "left": c[0]} if c else {"index": i, "exec": t}
            for i, (t, c) in enumerate(zip(config["tests"], checks, strict=True))
        ],
    }
    limit = float(config["per_test_s"]) * (len(checks) + 1) + 1  # inside the sandbox budget
    try:
        done = subprocess.run(
            [sys.executable, "runner.py"],
            input=json.dumps(job).encode(),
            capture_output=True,
            timeout=limit,
            check=False,
        )
        printed, errors = done.stdout, done.stderr
    except subprocess.TimeoutExpired as exc:
        printed, errors = exc.stdout or b"", exc.stderr or b""
    sys.stderr.write(errors.decode("utf-8", "replace")[-4000:])
    return printed


def run(config: dict[str, Any], report: Report) -> None:
    checks = [literal_check(t) for t in config["tests"]]
    seen: set[int] = set()
    for line in run_child(config, checks).decode("utf-8", "replace").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if not isinstance(record, dict):
            continue
        if "load_error" in record:
            report(load_error=str(record["load_error"]))
            return
        i = record.get("test")
        if not isinstance(i, int) or not 0 <= i < len(checks) or i in seen:
            continue
        seen.add(i)
        check = checks[i]
        if check is None:  # run whole in the child: its word is taken
            report(test=i, passed=bool(record.get("passed")), error=record.get("error"))
        else:
            error = judge(*check, record)
            report(test=i, passed=error is None, error=error)


if __name__ == "__main__":
    nonce, config = read_job()
    harden()
    run(config, reporter(nonce, sys.stdout))
