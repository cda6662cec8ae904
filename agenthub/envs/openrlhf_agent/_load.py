"""Finding the `AgentInstance` class an OpenRLHF agent file defines, or amounts to."""

from __future__ import annotations

import ast
import inspect
import textwrap
import threading
from pathlib import Path
from typing import Any

from agenthub._errors import AgentFuncError
from agenthub._tracebacks import described
from agenthub.envs import _openrlhf
from agenthub.envs._files import import_user_file
from agenthub.envs.openrlhf_agent._step_func import StepFunctionAgent

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
    _openrlhf.install()
    module = import_user_file(path, kind="agent", error=AgentFuncError)
    executor_cls = getattr(module, "AgentExecutor", None)
    if inspect.isclass(executor_cls):
        _refuse_custom_execute(executor_cls, path)
    cls = getattr(module, "AgentInstance", None) or _class_from_executor(executor_cls, path)
    if cls is None and executor_cls is None and hasattr(module, "step"):
        return _step_function_agent(module.step, path)
    if not (inspect.isclass(cls) and callable(getattr(cls, "step", None))):
        raise AgentFuncError(
            f"{path} defines no AgentInstance class with an async step(states) method; "
            "define `class AgentInstance(AgentInstanceBase)` as in OpenRLHF's agent_func.py "
            "(or, as in OpenRLHF's first agent API, a module-level "
            "`async def step(observation, action, label, **kwargs)`)"
        )
    _refuse_plain_methods(cls, path)
    return cls


def _refuse_plain_methods(cls: type, path: Path) -> None:
    """OpenRLHF's executor awaits `reset` and `step`, so a plain `def` fails there on the first
    episode; it is refused when the file is loaded, as a reward file's `async def
    reward_func` is, rather than run in a way OpenRLHF never runs it."""
    for name in ("reset", "step"):
        method = getattr(cls, name, None)
        method = method and inspect.unwrap(method)  # through functools.wraps decorators
        if inspect.isfunction(method) and not (
            inspect.iscoroutinefunction(method) or inspect.isasyncgenfunction(method)
        ):
            raise AgentFuncError(
                f"{path}: {cls.__qualname__}.{name} is a plain `def`, and OpenRLHF awaits an "
                f"agent's reset and step: make it `async def {name}(self, states, **kwargs)` "
                "(blocking code inside it is fine: each episode's agent runs on an event loop "
                "of its own)"
            )


def _step_function_agent(step: Any, path: Path) -> type:
    try:
        inspect.signature(step).bind("", "", "", sampling_params=None)
        fits = inspect.iscoroutinefunction(step)
    except (TypeError, ValueError):
        fits = False
    if not fits:
        raise AgentFuncError(
            f"{path} defines no AgentInstance class, and its module-level step is not "
            "`async def step(observation, action, label, **kwargs)` as OpenRLHF's oldest agent "
            "files define it; define one of the two"
        )
    return StepFunctionAgent.bind(path)


def _refuse_custom_execute(executor_cls: type, path: Path) -> None:
    """agenthub drives the AgentInstance itself (the model is sampled by whoever runs the
    episodes), so an `execute` the file overrides would never run: refuse it rather than
    train on something other than what the file asks for."""
    for klass in executor_cls.__mro__:
        execute = vars(klass).get("execute")
        ours = klass.__module__ == _openrlhf.__name__ or klass.__module__.startswith("openrlhf.")
        if execute is None or ours:
            continue
        if not _only_calls_super(execute):
            raise AgentFuncError(
                f"{path}: {klass.__name__} overrides execute(), which agenthub never runs: it "
                "runs the AgentInstance's reset/step itself, and the model is sampled by the "
                "trainer or evaluator, not by the executor. Move that logic into "
                "AgentInstance.step (rewards, feedback, when to stop), or write an agenthub "
                "Env for it"
            )


def _only_calls_super(function: Any) -> bool:
    """Whether `function` is `return await super().execute(<its own arguments>)`, the override
    OpenRLHF's examples carried for years, which changes nothing."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    except (OSError, TypeError, SyntaxError):
        return False
    definition = tree.body[0] if tree.body else None
    if not isinstance(definition, ast.AsyncFunctionDef | ast.FunctionDef):
        return False
    body = [s for s in definition.body if not _is_docstring(s)]
    if len(body) != 1 or not isinstance(body[0], ast.Return):
        return False
    call = body[0].value.value if isinstance(body[0].value, ast.Await) else body[0].value
    if not (
        isinstance(call, ast.Call)
        and isinstance(call.func, ast.Attribute)
        and call.func.attr == "execute"
        and isinstance(call.func.value, ast.Call)
        and isinstance(call.func.value.func, ast.Name)
        and call.func.value.func.id == "super"
    ):
        return False
    return _passes_own_arguments(definition.args, call)


def _is_docstring(statement: ast.stmt) -> bool:
    return isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant)


def _passes_own_arguments(args: ast.arguments, call: ast.Call) -> bool:
    """Whether `call` passes each parameter after `self` on unchanged, in its place."""
    positional = [a.arg for a in (*args.posonlyargs, *args.args)][1:]
    passed = []
    for i, arg in enumerate(call.args):
        if isinstance(arg, ast.Starred):
            if not (args.vararg and _is_name(arg.value, args.vararg.arg)):
                return False
            passed.append("*")
        elif i < len(positional) and _is_name(arg, positional[i]):
            passed.append(positional[i])
        else:
            return False
    for keyword in call.keywords:
        if keyword.arg is None:
            if not (args.kwarg and _is_name(keyword.value, args.kwarg.arg)):
                return False
            passed.append("**")
        elif _is_name(keyword.value, keyword.arg):
            passed.append(keyword.arg)
        else:
            return False
    expected = [*positional, *(a.arg for a in args.kwonlyargs)]
    expected += ["*"] * bool(args.vararg) + ["**"] * bool(args.kwarg)
    return sorted(passed) == sorted(expected)


def _is_name(node: ast.expr, name: str) -> bool:
    return isinstance(node, ast.Name) and node.id == name


def _class_from_executor(executor_cls: Any, path: Path) -> type | None:
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
            f"{path}: AgentExecutor() raised {described(exc)}; agenthub builds it "
            "only to find its AgentInstance class, so define AgentInstance at module level"
        ) from exc
    found = getattr(executor, "agent_instance_cls", None)
    return found if inspect.isclass(found) else None
