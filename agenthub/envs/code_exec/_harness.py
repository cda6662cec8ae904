"""Test specs, the programs that run them inside the sandbox, and reading their reports.

Two formats: assert-style tests of a named function (MBPP/HumanEval), and stdin/stdout cases,
each a real `python3 solution.py` subprocess fed the case's input. The programs that run
inside the sandbox are the `_in_sandbox_*` modules beside this one, sent as text. The model's
code never runs in the process that reports: the harness reads a per-run nonce and its
configuration (expected values included) from stdin, reports one nonce-prefixed JSON line per
test, and compares `assert CALL == LITERAL` tests itself with values the code's process sends
back as plain data. Forged report lines, a patched harness or an object that equals everything
pass nothing.
"""

from __future__ import annotations

import functools
import json
import re
import secrets
from dataclasses import dataclass
from importlib import resources
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from agenthub.sandbox import ExecResult, ExecStatus

__all__ = ["FunctionTests", "IOCase", "IOTests", "TestReport", "TestSpec", "parse_spec"]

SOLUTION = "solution.py"


class FunctionTests(BaseModel):
    """Assert statements against a function named `entry_point`, run after `setup`.

    `prefix` is prepended to the model's code when the code does not define `entry_point`
    itself (HumanEval's completion-style prompts)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    kind: Literal["function"] = "function"
    entry_point: str
    tests: tuple[str, ...]
    setup: str = ""
    prefix: str = ""


class IOCase(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    stdin: str
    stdout: str


class IOTests(BaseModel):
    """Programs fed `stdin`, whose printed output must equal `stdout` (trailing whitespace
    on each line ignored)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    kind: Literal["io"] = "io"
    cases: tuple[IOCase, ...]


TestSpec = Annotated[FunctionTests | IOTests, Field(discriminator="kind")]
_spec_adapter: TypeAdapter[FunctionTests | IOTests] = TypeAdapter(TestSpec)


def parse_spec(label: object) -> FunctionTests | IOTests:
    """A task label as a test spec; ValueError saying what a label must look like."""
    try:
        return _spec_adapter.validate_python(label)
    except ValueError as exc:
        raise ValueError(
            "a code_exec task label must be {'kind': 'function', 'entry_point': ..., 'tests': "
            + f"[...]}} or {{'kind': 'io', 'cases': [{{'stdin': ..., 'stdout': ...}}]}}: {exc}"
        ) from exc


def count(spec: FunctionTests | IOTests) -> int:
    return len(spec.tests) if isinstance(spec, FunctionTests) else len(spec.cases)


def describe(spec: FunctionTests | IOTests, index: int) -> str:
    if isinstance(spec, FunctionTests):
        return spec.tests[index]
    return f"input {spec.cases[index].stdin!r}"


@dataclass(frozen=True)
class Program:
    """A harness run: `main` is `main.py`, `files` go beside it, `stdin` carries the nonce and
    the configuration (expected values included), which are never written to a file."""

    main: str
    files: dict[str, str]
    stdin: str
    nonce: str


_HERE = resources.files("agenthub.envs.code_exec")


def _source(module: str) -> str:
    return _HERE.joinpath(f"_in_sandbox_{module}.py").read_text(encoding="utf-8")


@functools.cache
def _harness(kind: str) -> tuple[str, dict[str, str]]:
    support = {"harness_common.py": _source("common")}
    if kind == "function":
        return _source("function"), {**support, "runner.py": _source("runner")}
    return _source("io"), support


def build_program(spec: FunctionTests | IOTests, code: str, test_timeout_s: float) -> Program:
    nonce = secrets.token_hex(16)
    config: dict[str, Any] = {"per_test_s": test_timeout_s}
    if isinstance(spec, FunctionTests):
        if spec.prefix and not _defines(code, spec.entry_point):
            code = spec.prefix + code
        config |= {
            "tests": spec.tests,
            "setup": spec.setup,
            "entry": spec.entry_point,
            "solution": code,
        }
    else:
        config["cases"] = [c.model_dump() for c in spec.cases]
    main, support = _harness(spec.kind)
    stdin = f"{nonce}\n{json.dumps(config)}\n"
    return Program(main=main, files={**support, SOLUTION: code}, stdin=stdin, nonce=nonce)


def _defines(code: str, name: str) -> bool:
    return re.search(rf"\bdef\s+{re.escape(name)}\b", code) is not None


@dataclass(frozen=True)
class TestReport:
    """Which tests passed, and the first failure in a few lines."""

    passed: tuple[bool, ...]
    first_failure: str | None
    status: str

    @property
    def fraction(self) -> float:
        return sum(self.passed) / len(self.passed) if self.passed else 0.0

    @property
    def all_passed(self) -> bool:
        return bool(self.passed) and all(self.passed)


def no_code_report(spec: FunctionTests | IOTests) -> TestReport:
    return TestReport(
        passed=(False,) * count(spec),
        first_failure="I found no code in your reply.",
        status="no_code",
    )


def read_report(spec: FunctionTests | IOTests, program: Program, result: ExecResult) -> TestReport:
    """What the code's run says about it; a run the sandbox failed (`sandbox_failed`) is the
    caller's to raise."""
    n = count(spec)
    passed = [False] * n
    errors: dict[int, str] = {}
    load_error: str | None = None
    for line in result.stdout.splitlines():
        if not line.startswith(program.nonce):
            continue
        try:
            record = json.loads(line[len(program.nonce) :])
        except ValueError:
            continue
        if "load_error" in record:
            load_error = str(record["load_error"])
        elif isinstance(record.get("test"), int) and 0 <= record["test"] < n:
            passed[record["test"]] = bool(record["passed"])
            if record.get("error"):
                errors[record["test"]] = str(record["error"])
    status = str(result.status)
    failure: str | None
    if load_error is not None:
        failure = f"Your code failed before the tests ran:\n{load_error}"
    else:
        failure = _first_failure(spec, passed, errors, result)
    return TestReport(tuple(passed), failure, status)


def _first_failure(
    spec: FunctionTests | IOTests, passed: list[bool], errors: dict[int, str], result: ExecResult
) -> str | None:
    for i, ok in enumerate(passed):
        if ok:
            continue
        test = describe(spec, i)
        if i in errors:
            return f"Test {i + 1} of {len(passed)} failed: {test}\n{errors[i]}"
        return f"Test {i + 1} of {len(passed)} did not finish ({_why(result)})."
    return None


def _why(result: ExecResult) -> str:
    if result.status is ExecStatus.TIMEOUT:
        return "the program timed out"
    if result.status is ExecStatus.MEMORY_LIMIT:
        return "the program ran out of memory"
    if result.status is ExecStatus.OUTPUT_LIMIT:
        return "the program printed too much"
    tail = "\n".join(result.stderr.strip().splitlines()[-3:])
    return f"the program ended with {result.status}" + (f":\n{tail}" if tail else "")
