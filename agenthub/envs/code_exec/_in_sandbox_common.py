"""Shared by the test harnesses that run inside the sandbox, where it is `harness_common.py`.

A harness reads the run's nonce and its configuration from stdin (nothing secret is written
into the sandbox's work dir, where the tested code could read it), makes itself undumpable,
and reports one nonce-prefixed JSON line per test on stdout. agenthub itself never imports
these `_in_sandbox_*` modules; it sends their text into the sandbox.
"""

from __future__ import annotations

import ast
import json
import sys
import traceback
from collections.abc import Callable
from typing import Any, TextIO

Report = Callable[..., None]


def read_job() -> tuple[str, dict[str, Any]]:
    """The nonce and the configuration, the first two lines of stdin."""
    nonce = sys.stdin.readline().strip()
    config: dict[str, Any] = json.loads(sys.stdin.readline())
    return nonce, config


def harden() -> None:
    """Undumpable: processes of the same user (the tested code) can neither ptrace this one
    nor read its memory, environment or file descriptors under /proc."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4
    except (ImportError, OSError, AttributeError):  # no ctypes or not Linux: nothing to do
        pass


def reporter(nonce: str, out: TextIO) -> Report:
    """A function writing one report line; the nonce lives only in its closure."""

    def report(**record: Any) -> None:
        out.write(nonce + json.dumps(record) + "\n")
        out.flush()

    return report


def tail(exc: BaseException, limit: int = 3) -> str:
    """The last lines of an exception's message, short enough for feedback."""
    lines = traceback.format_exception_only(type(exc), exc)
    text = "".join(lines).strip().splitlines()
    return "\n".join(text[-limit:])[:500]


def equality(tree: ast.Module) -> tuple[ast.expr, ast.expr] | None:
    """The two sides of a test that is one `assert LEFT == RIGHT`, else None."""
    node = tree.body[0] if len(tree.body) == 1 else None
    if (
        isinstance(node, ast.Assert)
        and isinstance(node.test, ast.Compare)
        and len(node.test.ops) == 1
        and isinstance(node.test.ops[0], ast.Eq)
    ):
        return node.test.left, node.test.comparators[0]
    return None
