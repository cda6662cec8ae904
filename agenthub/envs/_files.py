"""Reading users' files: JSONL task files and Python files (reward functions, agents)."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

from agenthub._errors import AgentHubError, TaskFileError
from agenthub._tracebacks import described
from agenthub.envs import _openrlhf


def read_jsonl_records(path: str | Path) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """Yield `(where, default_id, record)` for each non-blank line: `where` is `file:line` for
    error messages, `default_id` is `<file stem>-<line>` for records without an id."""
    path = Path(path)
    if not path.exists():
        raise TaskFileError(f"task file {path} does not exist")
    if not path.is_file():
        raise TaskFileError(f"task file {path} is not a regular file; give a JSONL file")
    with path.open(encoding="utf-8-sig") as f:  # a byte-order mark is not part of the JSON
        for n, line in enumerate(f, start=1):
            if not line.strip():
                continue
            where = f"{path}:{n}"
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise TaskFileError(f"{where} is not valid JSON: {exc}") from exc
            if not isinstance(record, dict):
                raise TaskFileError(f"{where} must be a JSON object, not {type(record).__name__}")
            yield where, f"{path.stem}-{n}", record


def import_user_file(path: Path, *, kind: str, error: type[AgentHubError]) -> ModuleType:
    """Import a user's Python file as a module of its own (named after its path); failures
    raise `error` naming the file.

    The file's directory goes first on `sys.path`, as for a script Python runs, so the file
    can import the modules beside it (now or when it is called)."""
    folder = str(path.resolve().parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    name = f"agenthub_{kind.replace(' ', '_')}_{hashlib.sha1(str(path).encode()).hexdigest()[:12]}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise error(f"{path} cannot be imported as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        sys.modules.pop(name, None)
        missing = _openrlhf.missing_import(exc, path)
        if missing is not None:
            raise error(f"{kind} file {path} {missing}") from exc
        raise error(f"importing {kind} file {path} raised {described(exc)}") from exc
    return module
