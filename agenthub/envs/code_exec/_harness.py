"""Test specs, the programs that run them inside the sandbox, and reading their reports.

Two formats: assert-style tests of a named function (MBPP/HumanEval), run in one process with
a per-test alarm; and stdin/stdout cases, each a real `python3 solution.py` subprocess fed the
case's input. The model's code is `solution.py`; the harness reports one JSON line per test,
prefixed with a per-run nonce that the harness reads from stdin before the code runs, so
ordinary prints cannot pass for results.
"""

from __future__ import annotations

import json
import re
import secrets
from dataclasses import dataclass
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
    main: str
    solution: str
    stdin: str
    nonce: str


def build_program(spec: FunctionTests | IOTests, code: str, test_timeout_s: float) -> Program:
    nonce = secrets.token_hex(16)
    if isinstance(spec, FunctionTests):
        if spec.prefix and not _defines(code, spec.entry_point):
            code = spec.prefix + code
        config: dict[str, Any] = {
            "tests": spec.tests,
            "setup": spec.setup,
            "entry": spec.entry_point,
            "solution": code,
        }
        template = _FUNCTION_HARNESS
    else:
        config = {"cases": [c.model_dump() for c in spec.cases]}
        template = _IO_HARNESS
    main = template.replace("__CONFIG__", repr(json.dumps(config))).replace(
        "PER_TEST_S", repr(test_timeout_s)
    )
    return Program(main=main, solution=code, stdin=nonce + "\n", nonce=nonce)


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
    elif result.status is ExecStatus.SANDBOX_ERROR:
        failure = f"The sandbox failed (not your fault): {result.detail[:300]}"
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


_COMMON = r"""
import json, signal, sys, traceback

CONFIG = json.loads(__CONFIG__)


def reporter(nonce, out):
    # The nonce lives only in this closure, not in a global the tested code could read.
    def report(**record):
        out.write(nonce + json.dumps(record) + "\n")
        out.flush()

    return report


def tail(exc, limit=3):
    lines = traceback.format_exception_only(type(exc), exc)
    text = "".join(lines).strip().splitlines()
    return "\n".join(text[-limit:])[:500]
"""

_FUNCTION_HARNESS = (
    _COMMON
    + r"""
import ast, io


class Quiet(io.TextIOBase):
    # The tested code's own prints: kept out of the report.
    def write(self, s):
        return len(s)


class TestTimeout(BaseException):
    pass


def alarm(*_):
    raise TestTimeout()


def check(test, ns):
    tree = ast.parse(test)
    node = tree.body[0] if len(tree.body) == 1 else None
    if (
        isinstance(node, ast.Assert)
        and isinstance(node.test, ast.Compare)
        and len(node.test.ops) == 1
        and isinstance(node.test.ops[0], ast.Eq)
    ):
        left = eval(compile(ast.Expression(node.test.left), "<test>", "eval"), ns)
        right = eval(compile(ast.Expression(node.test.comparators[0]), "<test>", "eval"), ns)
        if left == right:
            return None
        call = ast.unparse(node.test.left)
        return f"{call} returned {repr(left)[:200]}, expected {repr(right)[:200]}"
    try:
        exec(compile(tree, "<test>", "exec"), ns)
    except AssertionError as exc:
        return "AssertionError" + (f": {exc}" if str(exc) else "")
    return None


def run(report):
    signal.signal(signal.SIGALRM, alarm)
    ns = {"__name__": "solution"}
    try:
        signal.setitimer(signal.ITIMER_REAL, PER_TEST_S)
        exec(compile(CONFIG["solution"], "solution.py", "exec"), ns)
        exec(CONFIG["setup"], ns)
        signal.setitimer(signal.ITIMER_REAL, 0)
    except TestTimeout:
        return report(load_error=f"defining your code took more than {PER_TEST_S} s")
    except BaseException as exc:
        signal.setitimer(signal.ITIMER_REAL, 0)
        return report(load_error=tail(exc))
    if CONFIG["entry"] not in ns:
        return report(load_error=f"NameError: your code does not define {CONFIG['entry']!r}")
    for i, test in enumerate(CONFIG["tests"]):
        try:
            signal.setitimer(signal.ITIMER_REAL, PER_TEST_S)
            error = check(test, ns)
            signal.setitimer(signal.ITIMER_REAL, 0)
        except TestTimeout:
            error = f"timed out after {PER_TEST_S} s"
        except BaseException as exc:
            signal.setitimer(signal.ITIMER_REAL, 0)
            error = tail(exc)
        report(test=i, passed=error is None, error=error)


_stdout = sys.stdout
sys.stdout = Quiet()
try:
    run(reporter(sys.stdin.readline().strip(), _stdout))
finally:
    sys.stdout = _stdout
"""
)

_IO_HARNESS = (
    _COMMON
    + r"""
import subprocess


def norm(text):
    return "\n".join(line.rstrip() for line in text.strip("\n").splitlines())


def run(report):
    for i, case in enumerate(CONFIG["cases"]):
        try:
            done = subprocess.run(
                [sys.executable, "solution.py"],
                input=case["stdin"].encode(),
                capture_output=True,
                timeout=PER_TEST_S,
            )
        except subprocess.TimeoutExpired:
            report(test=i, passed=False, error=f"timed out after {PER_TEST_S} s")
            continue
        printed = done.stdout.decode("utf-8", "replace")
        if done.returncode != 0:
            lines = done.stderr.decode("utf-8", "replace").strip().splitlines()
            report(test=i, passed=False, error="\n".join(lines[-3:])[:500])
        elif norm(printed) != norm(case["stdout"]):
            error = f"printed {printed[:200]!r}, expected {case['stdout'][:200]!r}"
            report(test=i, passed=False, error=error)
        else:
            report(test=i, passed=True, error=None)


run(reporter(sys.stdin.readline().strip(), sys.stdout))
"""
)
