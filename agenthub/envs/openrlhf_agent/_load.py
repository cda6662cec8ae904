"""Finding the `AgentInstance` class an OpenRLHF agent file defines."""

from __future__ import annotations

import inspect
import threading
from pathlib import Path
from typing import Any

from agenthub._errors import AgentFuncError
from agenthub.envs._files import import_user_file
from agenthub.envs.openrlhf_agent import _compat

_classes: dict[tuple[Path, int], type] = {}
_lock = threading.Lock()


def load_agent_instance_class(path: str | Path) -> type:
    """The `AgentInstance` class an OpenRLHF agent file defines (imported once per change)."""
    path = Path(path).expanduser().resolve()
    if not path.is_file():
        raise AgentFuncError(f"agent file {path} does not exist")
    key = (path, path.stat().st_mtime_ns)
    with _lock:
        if key not in _classes:
            _classes[key] = _import_agent_class(path)
    return _classes[key]


def _import_agent_class(path: Path) -> type:
    _compat.install()
    module = import_user_file(path, kind="agent", error=AgentFuncError)
    cls = getattr(module, "AgentInstance", None) or _class_from_executor(module, path)
    if not (inspect.isclass(cls) and callable(getattr(cls, "step", None))):
        raise AgentFuncError(
            f"{path} defines no AgentInstance class with an async step(states) method; "
            "define `class AgentInstance(AgentInstanceBase)` as in OpenRLHF's agent_func.py"
        )
    return cls


def _class_from_executor(module: Any, path: Path) -> type | None:
    executor_cls = getattr(module, "AgentExecutor", None)
    if executor_cls is None:
        return None
    params = [
        p
        for p in inspect.signature(executor_cls.__init__).parameters.values()
        if p.kind is p.POSITIONAL_OR_KEYWORD and p.default is p.empty
    ][1:]  # old OpenRLHF: (max_steps, max_length, llm_engine, [hf_tokenizer,] result_queue)
    try:
        executor = executor_cls(*[None] * len(params))
    except Exception as exc:
        raise AgentFuncError(
            f"{path}: AgentExecutor() raised {type(exc).__name__}: {exc}; agenthub builds it "
            "only to find its AgentInstance class, so define AgentInstance at module level"
        ) from exc
    found = getattr(executor, "agent_instance_cls", None)
    return found if inspect.isclass(found) else None
