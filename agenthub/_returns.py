"""What `reset` and `step` must return, checked wherever an env's answer is used (the episode
runner, the REPL, `check_env`), so a wrong type is named as the env's mistake, on that one
episode, instead of surfacing later as an AttributeError in agenthub's own code; and that an
env's methods are what agenthub calls them as: coroutines where it awaits them, taking the
arguments it passes (`make` and `check_env`)."""

from __future__ import annotations

import inspect
import itertools
import json
import math
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from agenthub._errors import AgentHubError
from agenthub._types import Message, Step, Task

_AWAITED = {
    "reset": "async def reset(self, task, *, seed=None)",
    "step": "async def step(self, action)",
    "aclose": "async def aclose(self)",
}
_SIGNATURES = {**_AWAITED, "tasks": "def tasks(self, split='train')"}
_CALLED_WITH: dict[str, tuple[tuple[Any, ...], dict[str, Any]]] = {
    "reset": (("task",), {"seed": 0}),
    "step": (("action",), {}),
    "aclose": ((), {}),
    "tasks": (("train",), {}),
}


def method_problems(env: Any) -> list[str]:
    """What is wrong with how `env` (or the env its wrappers hold) defines the methods agenthub
    calls: one that is not a method at all, one agenthub awaits defined without `async`
    (awaiting it fails with a TypeError that does not say what to change), `tasks` defined
    async, or a method that cannot take the arguments agenthub passes (`reset` without `seed`,
    say), which would otherwise fail only when first called, pointing into agenthub's code."""
    inner = env.unwrapped
    problems = []
    for layer in [env] if inner is env else [env, inner]:
        for name, (args, kwargs) in _CALLED_WITH.items():
            if problem := _method_problem(type(layer).__name__, name, getattr(layer, name)):
                problems.append(problem)
                continue
            try:
                signature = inspect.signature(getattr(layer, name))
            except (ValueError, TypeError):  # no signature to read (a builtin): nothing to say
                continue
            try:
                signature.bind(*args, **kwargs)
            except TypeError:
                problems.append(
                    f"{type(layer).__name__}.{name}{signature} cannot be called as agenthub "
                    f"calls it; it must be `{_SIGNATURES[name]}`"
                )
    return problems


def _method_problem(owner: str, name: str, method: Any) -> str | None:
    if not callable(method):
        return f"{owner}.{name} must be a method `{_SIGNATURES[name]}`, not {_brief(method)}"
    if name in _AWAITED and not inspect.iscoroutinefunction(method):
        return (
            f"{owner}.{name} must be `{_AWAITED[name]}`, not def: agenthub awaits it on an "
            "event loop that many episodes share"
        )
    if name == "tasks" and (
        inspect.iscoroutinefunction(method) or inspect.isasyncgenfunction(method)
    ):
        return (
            f"{owner}.tasks must be a plain `def tasks(self, split)` that returns or yields "
            "Tasks, not async: it is read outside any event loop"
        )
    return None


class EnvReturnError(TypeError):
    """An env's `reset` or `step` returned the wrong thing; the message says what it must be."""


def checked_reset(value: Any) -> tuple[Any, Mapping[str, Any]]:
    """`value` if `reset` may return it, else `EnvReturnError`."""
    if problems := reset_problems(value):
        raise EnvReturnError("; ".join(problems))
    return value  # type: ignore[no-any-return]


def checked_step(value: Any) -> Step[Any]:
    """`value` if `step` may return it, else `EnvReturnError`."""
    if problems := step_problems(value):
        raise EnvReturnError("; ".join(problems))
    return value  # type: ignore[no-any-return]


def reset_problems(value: Any) -> list[str]:
    """What is wrong with `value` as what `reset` returns, `(observation, info)`."""
    if not (isinstance(value, tuple) and len(value) == 2):
        return [f"reset must return (observation, info), got {_shape(value)}"]
    observation, info = value
    found = [observation_problem("reset", observation), info_problem("reset", info)]
    return [p for p in found if p]


def step_problems(value: Any) -> list[str]:
    """What is wrong with `value` as what `step` returns, an `agenthub.Step`."""
    if not isinstance(value, Step):
        return [
            "step must return agenthub.Step(observation, reward, terminated, truncated, info), "
            f"got {_shape(value)}"
        ]
    found = [observation_problem("step", value.observation), info_problem("step", value.info)]
    for flag in ("terminated", "truncated"):
        if not isinstance(getattr(value, flag), bool):
            found.append(f"Step.{flag} must be a bool, got {getattr(value, flag)!r}")
    if value.score is not None and not finite(value.score):
        found.append(f"Step.score must be a finite float or None, got {value.score!r}")
    if not isinstance(value.extra_logs, Mapping):
        found.append(f"Step.extra_logs must be a dict, got {type(value.extra_logs).__name__}")
    elif bad := {k: v for k, v in value.extra_logs.items() if not finite(v)}:
        found.append(f"Step.extra_logs values must be finite numbers, got {bad!r}")
    return [p for p in found if p]


def observation_problem(where: str, observation: Any) -> str | None:
    """Why `observation` is neither a str nor a list of `agenthub.Message`s, or None."""
    if isinstance(observation, str):
        return None
    if isinstance(observation, list):
        strays = sorted({type(m).__name__ for m in observation if not isinstance(m, Message)})
        if not strays:
            return None
        return (
            f"{where} returned an observation that is a list of {' and '.join(strays)}; it "
            "must be a str or a list of agenthub.Message: wrap each item as "
            "agenthub.Message(role=..., content=...)"
        )
    return (
        f"{where} returned an observation of type {type(observation).__name__}; it must be a "
        "list of agenthub.Message or a str"
    )


def checked_tools(env: Any) -> list[dict[str, Any]]:
    """The env's `tools` as plain dicts, else `EnvReturnError` saying what is wrong."""
    tools = env.tools
    if isinstance(tools, str | bytes | Mapping) or not isinstance(tools, Sequence):
        raise EnvReturnError(
            f"{type(env).__name__}.tools must be a list of JSON schemas, got {type(tools).__name__}"
        )
    out = []
    for i, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, Mapping) else None
        if not (
            isinstance(tool, Mapping)
            and tool.get("type") == "function"
            and isinstance(function, Mapping)
            and isinstance(function.get("name"), str)
        ):
            raise EnvReturnError(
                f"{type(env).__name__}.tools[{i}] must be a dict "
                '{"type": "function", "function": {"name": ..., "description": ..., '
                f'"parameters": ...}}, got {_brief(tool)}; '
                "agenthub.tools.function_schema(f) writes one for a Python function"
            )
        try:
            out.append(json.loads(json.dumps(tool)))
        except (TypeError, ValueError) as exc:
            raise EnvReturnError(
                f"{type(env).__name__}.tools[{i}] ({function['name']!r}) is not JSON: {exc}"
            ) from exc
    return out


def checked_stop(env: Any) -> tuple[str, ...]:
    """The env's `stop` strings as a tuple, else `EnvReturnError` saying what is wrong."""
    stop = env.stop
    if isinstance(stop, str | bytes) or not isinstance(stop, Sequence):
        raise EnvReturnError(
            f"{type(env).__name__}.stop must be a list of strings, got {_brief(stop)}; "
            'write stop = ("</search>",) for one string'
        )
    for item in stop:
        if not isinstance(item, str) or not item:
            raise EnvReturnError(
                f"{type(env).__name__}.stop holds {_brief(item)}; each must be a non-empty string"
            )
    return tuple(stop)


def task_problem(value: Any, source: str = "env.tasks() yielded") -> str | None:
    """Why `value`, from `source`, is not a Task, or None."""
    if isinstance(value, Task):
        return None
    return (
        f"{source} {type(value).__name__}, not agenthub.Task; make each with "
        "agenthub.Task(id=..., prompt=...)"
    )


def checked_tasks(tasks: Iterable[Any]) -> Iterator[Task]:
    """An env's tasks as they are read, an `AgentHubError` at the first that is no Task (a
    dict, say), rather than an AttributeError wherever the run first reads its id."""
    for task in tasks:
        if problem := task_problem(task):
            raise AgentHubError(problem)
        yield task


READ_AHEAD = 10_000
"""How many tasks of a split are read before anything runs on them: a task file is read whole
unless it is longer, an endless generator that far."""
READ_AHEAD_S = 5.0
"""How long that reading may take: a slow task source (a generator drawing each task, a remote
dataset) is read only as far as it gets in this time."""


def read_ahead(tasks: Iterable[Any], within_s: float, limit: int = READ_AHEAD) -> int:
    """Read the first `limit` of an env's `tasks` (fewer where `within_s` seconds pass first),
    each checked to be a Task, and say how many there were: a bad line further on in a task file
    then raises its `TaskFileError` now, not once a run has reached it."""
    deadline = time.monotonic() + within_s
    count = 0
    for _ in itertools.islice(checked_tasks(tasks), limit):
        count += 1
        if time.monotonic() > deadline:
            break
    return count


def checked_system_prompt(env: Any) -> str | None:
    """The env's `system_prompt`, else `EnvReturnError` saying what it must be."""
    system = env.system_prompt
    if system is not None and not isinstance(system, str):
        raise EnvReturnError(
            f"{type(env).__name__}.system_prompt must be text or None, got {_brief(system)}"
        )
    return system


def info_problem(where: str, info: Any) -> str | None:
    """Why `info` is not a dict, or None."""
    if not isinstance(info, Mapping):
        return f"{where} info must be a dict, got {type(info).__name__}"
    return None


def finite(value: Any) -> bool:
    """A finite int or float (not a bool)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _brief(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _shape(value: Any) -> str:
    return f"a {len(value)}-tuple" if isinstance(value, tuple) else type(value).__name__
