"""Code task files: MBPP-style and HumanEval-style JSONL, and agenthub's own."""

from __future__ import annotations

import ast
import builtins
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from agenthub._errors import TaskFileError
from agenthub._types import Task
from agenthub.envs._files import read_jsonl_records
from agenthub.envs.code_exec._harness import FunctionTests, parse_spec

__all__ = ["FORMATS", "read_code_tasks"]

FORMATS = ("auto", "mbpp", "humaneval", "agenthub")
_ANSWER = "Answer with the code in a ```python block."


def read_code_tasks(path: str | Path, *, format: str = "auto") -> Iterator[Task]:
    """Tasks from a JSONL file, one per line.

    - `mbpp`: `text`, `test_list` (assert statements), optional `test_setup_code`, `code`
      (a reference solution), `entry_point` (else the function the first test calls), `task_id`.
    - `humaneval`: `prompt` (signature and docstring), `test` (defining `check(candidate)`),
      `entry_point`, optional `canonical_solution`, `task_id`.
    - `agenthub`: `prompt`, `label` (a test spec, see `FunctionTests`/`IOTests`), optional
      `id` and `metadata`.
    - `auto` tells them apart by their fields, line by line.
    """
    if format not in FORMATS:
        raise ValueError(f"unknown code task format {format!r}; choose one of {FORMATS}")
    for where, default_id, record in read_jsonl_records(path):
        try:
            kind = _detect(record) if format == "auto" else format
            task = _READERS[kind](record, default_id)
        except (ValueError, KeyError, SyntaxError) as exc:
            raise TaskFileError(f"{where}: not a valid {format} code task: {exc!r}") from exc
        yield task


def _detect(record: dict[str, Any]) -> str:
    if "test_list" in record:
        return "mbpp"
    if "test" in record and "entry_point" in record:
        return "humaneval"
    if "label" in record:
        return "agenthub"
    raise ValueError(
        f"cannot tell the format from the fields {sorted(record)}: MBPP has test_list, "
        "HumanEval has test and entry_point, agenthub's own has label"
    )


def _mbpp(record: dict[str, Any], default_id: str) -> Task:
    tests = tuple(str(t) for t in record["test_list"])
    entry = record.get("entry_point") or _called_function(tests[0])
    shown = "\n".join(tests)
    prompt = f"{record['text']}\nYour code should pass these tests:\n{shown}\n{_ANSWER}"
    label = FunctionTests(
        entry_point=entry, tests=tests, setup=str(record.get("test_setup_code") or "")
    )
    metadata: dict[str, Any] = {"source": "mbpp"}
    if record.get("code"):
        metadata["reference"] = f"```python\n{record['code'].strip()}\n```"
    task_id = str(record.get("task_id", default_id))
    return Task(id=task_id, prompt=prompt, label=label.model_dump(mode="json"), metadata=metadata)


def _called_function(test: str) -> str:
    for node in ast.walk(ast.parse(test)):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and not hasattr(builtins, node.func.id)
        ):
            return node.func.id
    raise ValueError(f"cannot find the function under test in {test!r}; add entry_point")


def _humaneval(record: dict[str, Any], default_id: str) -> Task:
    entry, test, stub = record["entry_point"], record["test"], record["prompt"]
    label = FunctionTests(
        entry_point=entry,
        tests=_check_asserts(test) or (f"check({entry})",),
        setup=f"{test}\ncandidate = {entry}\n",
        prefix=stub,
    )
    prompt = f"Complete this Python function:\n```python\n{stub}```\n{_ANSWER}"
    metadata: dict[str, Any] = {"source": "humaneval"}
    if record.get("canonical_solution"):
        metadata["reference"] = f"```python\n{stub}{record['canonical_solution']}```"
    task_id = str(record.get("task_id", default_id))
    return Task(id=task_id, prompt=prompt, label=label.model_dump(mode="json"), metadata=metadata)


def _check_asserts(test: str) -> tuple[str, ...]:
    """The asserts in `check(candidate)`'s body, one test each, when the body is only asserts
    (so reward can count them); empty otherwise, and the whole `check` is one test."""
    for node in ast.parse(test).body:
        if isinstance(node, ast.FunctionDef) and node.name == "check":
            body = [
                s
                for s in node.body
                if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))
            ]
            if body and all(isinstance(s, ast.Assert) for s in body):
                return tuple(ast.unparse(s) for s in body)
    return ()


def _agenthub(record: dict[str, Any], default_id: str) -> Task:
    spec = parse_spec(record["label"])
    return Task(
        id=str(record.get("id", default_id)),
        prompt=record["prompt"],
        label=spec.model_dump(mode="json"),
        metadata=record.get("metadata", {}),
    )


_READERS = {"mbpp": _mbpp, "humaneval": _humaneval, "agenthub": _agenthub}
