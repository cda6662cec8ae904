"""The function-test harness (`main.py` in the sandbox): assert-style tests of a named function.

The tested code runs in a child process (`runner.py`) that never sees an expected value. For
a test `assert CALL == LITERAL` the child sends back CALL's value as plain data and this
process compares it with the literal. For any other single `assert EXPR` whose calls of the
tested function can be lifted out (not inside a comprehension or lambda, the function not
passed as a value, every other name a builtin or defined by the task's setup, and none given
to a call and read again after it), the child sends back the value of each such call and this
process evaluates EXPR on them (`math.isclose(f(x), y)`, `abs(f(3) - 1.5) < 1e-9`,
`f(4) == f(2) * 2`). So neither patching the harness or a module the test uses, forging report
lines nor returning an object that equals everything can pass such a test. Only the forms left
(several statements, `check(candidate)`, calls inside a comprehension) run whole in the child,
which says whether they passed.

The child is forked before this process reads its job (nothing it inherits holds an expected
value or the nonce) and gets its job through a pipe: one interpreter start-up and one round of
imports per run instead of two.
"""

from __future__ import annotations

import ast
import builtins
import json
import os
import selectors
import signal
import sys
import time
import traceback
from typing import Any

import runner  # type: ignore[import-not-found]
from harness_common import (  # type: ignore[import-not-found]
    Report,
    equality,
    harden,
    read_job,
    reporter,
)

VALUE = "_agenthub_value_"
HERE = os.path.dirname(os.path.abspath(__file__))
# Once the child has exited, how long processes it left behind may keep its pipes open.
DRAIN_S = 0.2


class Lifted:
    """A test `assert EXPR` with its calls of the tested function taken out: `calls` are their
    sources, for the child; `code` is EXPR compiled with call K replaced by the name
    `VALUE + K`, for this process. `expected` holds the literal of `assert CALL == LITERAL`,
    for the feedback."""

    def __init__(self, calls: list[str], expr: ast.expr, expected: tuple[Any, ...] = ()) -> None:
        self.calls = calls
        self.code = compile(ast.Expression(ast.fix_missing_locations(expr)), "<test>", "eval")
        self.expected = expected


def literal_check(test: str) -> Lifted | None:
    """`assert CALL == LITERAL` as a `Lifted` whose one call is CALL (any expression), else
    None."""
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
    compare = ast.Compare(ast.Name(f"{VALUE}0", ast.Load()), [ast.Eq()], [right])
    return Lifted([ast.unparse(left)], compare, (expected,))


class _Lift(ast.NodeTransformer):
    def __init__(self, entry: str) -> None:
        self.entry = entry
        self.calls: list[str] = []
        self.passed: set[str] = set()  # the names the calls' arguments use
        self.scoped = 0
        self.stuck = False

    def visit_Call(self, node: ast.Call) -> ast.expr:
        if not (isinstance(node.func, ast.Name) and node.func.id == self.entry):
            return self.generic_visit(node)  # type: ignore[return-value]
        if self.scoped:  # its arguments may name the comprehension's or lambda's variables
            self.stuck = True
            return node
        name = ast.Name(f"{VALUE}{len(self.calls)}", ast.Load())
        self.calls.append(ast.unparse(node))
        self.passed |= {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} - {self.entry}
        return ast.copy_location(name, node)

    def _scope(self, node: ast.AST) -> ast.AST:
        self.scoped += 1
        node = self.generic_visit(node)
        self.scoped -= 1
        return node

    visit_Lambda = visit_ListComp = visit_SetComp = visit_DictComp = _scope
    visit_GeneratorExp = _scope


def lifted_check(test: str, entry: str, known: dict[str, Any]) -> Lifted | None:
    """`test` as a `Lifted` when it is one `assert EXPR` whose calls of `entry` can be
    evaluated apart from the rest; `known` holds the names EXPR may use besides builtins."""
    try:
        tree = ast.parse(test)
    except SyntaxError:
        return None
    node = tree.body[0] if len(tree.body) == 1 else None
    if not isinstance(node, ast.Assert):
        return None
    lift = _Lift(entry)
    expr = lift.visit(node.test)
    if lift.stuck or not lift.calls:
        return None
    bound = {n.id for n in ast.walk(expr) if isinstance(n, ast.Name) and not _loads(n)}
    bound |= {a.arg for n in ast.walk(expr) if isinstance(n, ast.Lambda) for a in _args(n)}
    allowed = known.keys() | bound | vars(builtins).keys()
    loads = {n.id for n in ast.walk(expr) if isinstance(n, ast.Name) and _loads(n)}
    loads = {name for name in loads if not name.startswith(VALUE)}
    if entry in loads or not loads <= allowed:
        return None
    if loads & lift.passed - vars(builtins).keys():
        return None  # `f(xs) is None and xs == [1, 2]`: the call may change what it was given
    return Lifted(lift.calls, expr)


def _loads(name: ast.Name) -> bool:
    return isinstance(name.ctx, ast.Load)


def _args(node: ast.Lambda) -> list[ast.arg]:
    a = node.args
    rest = [x for x in (a.vararg, a.kwarg) if x is not None]
    return [*a.posonlyargs, *a.args, *a.kwonlyargs, *rest]


def setup_names(setup: str) -> dict[str, Any]:
    """The names the task's setup code defines (it is the task's, not the tested code's), run
    here before the tested code runs anywhere; empty when it needs the tested code."""
    names: dict[str, Any] = {"__name__": "setup"}
    try:
        exec(compile(setup, "<setup>", "exec"), names)
    except Exception:  # it needs the tested code: no test may use its names here, the child
        return {}  # runs those tests whole, and the setup's error shows when the child runs it
    return names


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


def judge(lifted: Lifted, known: dict[str, Any], record: dict[str, Any]) -> str | None:
    """None when the test holds on the child's values of the lifted calls, else what failed."""
    values = record.get("values")
    if not isinstance(values, list) or len(values) != len(lifted.calls):
        return str(record.get("error") or "the tested function did not return")
    try:
        decoded = [decode(v) for v in values]
    except (ValueError, TypeError, KeyError) as exc:
        return f"the tested function returned something unreadable ({exc})"
    names = {**known, **{f"{VALUE}{k}": v for k, v in enumerate(decoded)}}
    try:
        if eval(lifted.code, names):
            return None
        failure = "AssertionError"
    except Exception as exc:
        failure = f"{type(exc).__name__}: {str(exc)[:200]}"
    if lifted.expected and failure == "AssertionError":
        value, expected = decoded[0], lifted.expected[0]
        return f"{lifted.calls[0]} returned {repr(value)[:200]}, expected {repr(expected)[:200]}"
    returned = ", ".join(
        f"{call} returned {repr(v)[:100]}" for call, v in zip(lifted.calls, decoded, strict=True)
    )
    return f"{failure} ({returned})"


def _child_test(i: int, test: str, check: Lifted | None) -> dict[str, Any]:
    if check is None:
        return {"index": i, "exec": test}
    return {"index": i, "calls": check.calls}


class Child:
    """The process that runs the tested code (`runner.main`), forked when made: make it before
    reading the job. Its stdin is a pipe from this process (the job's stdin, which holds the
    expected values, is not open in it), its stdout and stderr are pipes to this process."""

    def __init__(self) -> None:
        job_r, self._job = os.pipe()
        self._out, out_w = os.pipe()
        self._err, err_w = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:
            code = 1
            try:
                for fd, target in ((job_r, 0), (out_w, 1), (err_w, 2)):
                    os.dup2(fd, target)
                for fd in (job_r, self._job, self._out, out_w, self._err, err_w):
                    os.close(fd)
                sys.path.insert(0, HERE)  # as for a script here: the tested code may import
                runner.main()
                code = 0
            except BaseException:
                traceback.print_exc()
            finally:
                sys.stderr.flush()
                os._exit(code)  # never back into this process's code, and no atexit of its own
        for fd in (job_r, out_w, err_w):
            os.close(fd)

    def run(self, job: dict[str, Any], limit_s: float) -> tuple[bytes, bytes]:
        """Send `job`, then what the child printed on stdout and stderr until it closed them
        or `limit_s` passed (then it is killed). Processes the tested code started may hold
        the pipes open after the child has exited: they get `DRAIN_S`, and the sandbox kills
        them when this process is done."""
        try:
            with os.fdopen(self._job, "wb") as pipe:  # read whole before it prints anything
                pipe.write(json.dumps(job).encode())
        except BrokenPipeError:  # it died first: its stderr says why
            pass
        printed: dict[int, list[bytes]] = {self._out: [], self._err: []}
        deadline = time.monotonic() + limit_s
        exited = _pidfd(self.pid)
        with selectors.DefaultSelector() as selector:
            for fd in [*printed, *([exited] if exited is not None else [])]:
                selector.register(fd, selectors.EVENT_READ)
            while printed.keys() & selector.get_map().keys():
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                for key, _ in selector.select(left):
                    if key.fd == exited:  # the child is gone; its output is in the pipes
                        selector.unregister(exited)
                        deadline = min(deadline, time.monotonic() + DRAIN_S)
                        continue
                    data = os.read(key.fd, 1 << 16)
                    if data:
                        printed[key.fd].append(data)
                    else:
                        selector.unregister(key.fd)
        os.kill(self.pid, signal.SIGKILL)  # not reaped yet, so still this child, maybe a zombie
        os.waitpid(self.pid, 0)
        for fd in [*printed, *([exited] if exited is not None else [])]:
            os.close(fd)
        return b"".join(printed[self._out]), b"".join(printed[self._err])


def _pidfd(pid: int) -> int | None:
    """A descriptor that becomes readable when `pid` exits, where the kernel and the sandbox's
    system-call filter allow one; without it the pipes closing is the only sign."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def run_child(child: Child, config: dict[str, Any], checks: list[Lifted | None]) -> bytes:
    job = {
        "solution": config["solution"],
        "setup": config["setup"],
        "entry": config["entry"],
        "per_test_s": config["per_test_s"],
        "tests": [
            _child_test(i, t, c)
            for i, (t, c) in enumerate(zip(config["tests"], checks, strict=True))
        ],
    }
    limit = float(config["per_test_s"]) * (len(checks) + 1) + 1  # inside the sandbox budget
    printed, errors = child.run(job, limit)
    sys.stderr.write(errors.decode("utf-8", "replace")[-4000:])
    return printed


def run(child: Child, config: dict[str, Any], report: Report) -> None:
    known = setup_names(config["setup"])
    checks: list[Lifted | None] = [
        literal_check(t) or lifted_check(t, config["entry"], known) for t in config["tests"]
    ]
    seen: set[int] = set()
    for line in run_child(child, config, checks).decode("utf-8", "replace").splitlines():
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
            error = judge(check, known, record)
            report(test=i, passed=error is None, error=error)


if __name__ == "__main__":
    # The tested code may write files beside this one; nothing is imported from there later.
    sys.path = [p for p in sys.path[1:] if p]
    child = Child()  # before the job is read
    nonce, config = read_job()
    harden()
    run(child, config, reporter(nonce, sys.stdout))
