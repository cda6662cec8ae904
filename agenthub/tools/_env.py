"""`ToolEnv`: a multi-turn environment in which the model calls Python functions, then answers."""

from __future__ import annotations

import abc
import functools
import inspect
from collections.abc import Callable, Sequence
from typing import Any

import anyio
import pydantic_core
from pydantic import BaseModel, ValidationError

from agenthub._env import Env
from agenthub._tracebacks import described
from agenthub._transcript import transcript
from agenthub._types import Message, Step, Task
from agenthub.tools._calls import ToolCall, parse_tool_calls
from agenthub.tools._schema import arguments_model, function_schema

__all__ = ["ToolEnv"]


class ToolEnv(Env[list[Message]], abc.ABC):
    """A multi-turn environment where the model may call Python functions before it answers.

    Subclass it with the functions and a `score`:

        class Calculator(ToolEnv):
            functions = (add, multiply)

            async def score(self, task, answer):
                return 1.0 if str(task.label) in answer else 0.0

    The functions' schemas (`agenthub.tools.function_schema`) are offered to the model through
    the chat template (`Env.tools`). Each reply's calls (`parse_calls`) run in order, their
    arguments checked against the type hints; the results come back as `tool` messages, and
    a call that cannot run (unknown function, bad arguments, the function raised) is answered
    with what went wrong, so the model can learn from it. A reply without calls is the answer:
    `score(task, answer)` is its reward and the episode ends. After `max_turns` replies with
    calls and no answer the episode is truncated with reward 0, as it is when the reply
    without calls was cut off by the token limit (`agenthub.transcript()`), which would
    otherwise be scored as if finished. A result longer than
    `max_result_chars` is cut there (the model is told how much was left out).

    A `reset` that narrows `self.tools` for a task also narrows what may be called. Calls
    inside `<think>` reasoning are not run. `score` gets the whole reply, reasoning included.

    Plain `def` functions run in a worker thread and `async def` ones on the event loop. A
    function that may hang or must not be trusted belongs in the sandbox
    (`agenthub.sandbox`), not here: a thread cannot be killed.
    """

    functions: Sequence[Callable[..., Any]] = ()
    max_turns: int = 8
    max_result_chars: int = 4000

    def __init__(
        self,
        functions: Sequence[Callable[..., Any]] | None = None,
        *,
        max_turns: int | None = None,
    ) -> None:
        if functions is not None:
            self.functions = tuple(functions)
        if max_turns is not None:
            self.max_turns = max_turns
        if self.max_turns < 1:
            raise ValueError(f"max_turns must be at least 1, got {self.max_turns}")
        self._by_name: dict[str, tuple[Callable[..., Any], type[BaseModel]]] = {}
        for function in self.functions:
            name = function.__name__
            if name in self._by_name:
                raise ValueError(f"two tools are named {name!r}; tool names must be unique")
            self._by_name[name] = (function, arguments_model(function))
        self.tools = [function_schema(f) for f in self.functions]
        self.task: Task | None = None
        self.turns = 0

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        score = cls.__dict__.get("score")
        if score is not None and not inspect.iscoroutinefunction(score):
            raise TypeError(
                f"{cls.__name__}.score must be `async def score(self, task, answer)`, not def: "
                "the episode awaits it"
            )
        parse = cls.__dict__.get("parse_calls")
        if inspect.iscoroutinefunction(parse) or inspect.isasyncgenfunction(parse):
            raise TypeError(
                f"{cls.__name__}.parse_calls must be a plain `def parse_calls(self, reply)` "
                "returning a list of ToolCall, not async"
            )

    @abc.abstractmethod
    async def score(self, task: Task, answer: str) -> float:
        """The reward for `answer`, the reply that called no tool: a number (a bool or a
        numpy scalar is taken as one)."""

    async def reset(
        self, task: Task, *, seed: int | None = None
    ) -> tuple[list[Message], dict[str, Any]]:
        if "_by_name" not in self.__dict__:
            raise RuntimeError(
                f"{type(self).__name__}.__init__ does not call super().__init__(), where "
                "ToolEnv turns `functions` into the tools the model sees; call it (it takes "
                "functions= and max_turns=)"
            )
        self.reseed(seed)
        self.task, self.turns = task, 0
        return [], {}

    async def step(self, action: str) -> Step[list[Message]]:
        if self.task is None:
            raise RuntimeError("step called before reset")
        calls = self.parse_calls(action)
        if not isinstance(calls, list | tuple) or not all(isinstance(c, ToolCall) for c in calls):
            raise TypeError(
                f"{type(self).__name__}.parse_calls returned {type(calls).__name__} "
                f"{calls!r:.80}; it must return a list of agenthub.tools.ToolCall (empty when "
                "the reply calls nothing)"
            )
        if not calls:
            seen = transcript()
            if seen is not None and seen.finish_reason == "length":
                # Cut off by the token limit: an unfinished reply, not an answer to score.
                return Step([], 0.0, truncated=True, info={"cut_off": True})
            return Step([], self._reward(await self.score(self.task, action)), terminated=True)
        self.turns += 1
        results = [
            Message(
                role="tool",
                content=await self.call(call),
                name=call.name or None,
                tool_call_id=call.id,
            )
            for call in calls
        ]
        return Step(results, 0.0, truncated=self.turns >= self.max_turns)

    def parse_calls(self, reply: str) -> list[ToolCall]:
        """The calls `reply` makes, in order; none means the reply is the answer. The Hermes
        `<tool_call>{...}</tool_call>` form by default (`parse_tool_calls`), which Qwen's and
        the default model's chat templates teach. Override it for a model whose template
        teaches another form; a call that cannot be read is a `ToolCall` with `error` set, and
        is answered with that error. (`check_env` writes its calls in the Hermes form.)"""
        return parse_tool_calls(reply)

    def _reward(self, value: Any) -> float:
        if isinstance(value, bool | int | float) or (
            hasattr(value, "item") and getattr(value, "size", 1) == 1
        ):
            return float(value)
        raise TypeError(
            f"{type(self).__name__}.score returned {type(value).__name__} {value!r:.60}; it "
            "must return a number, the episode's reward"
        )

    async def call(self, call: ToolCall) -> str:
        """Run one call and return what the model is told: the result as text (JSON unless
        it is a str), or what went wrong."""
        if call.error is not None:
            return f"error: {call.error}"
        offered = [str(tool["function"]["name"]) for tool in self.tools]
        if call.name not in offered or call.name not in self._by_name:
            known = ", ".join(offered) or "none"
            return f"error: there is no tool named {call.name!r} (tools: {known})"
        function, model = self._by_name[call.name]
        try:
            arguments = dict(model.model_validate(call.arguments))
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(map(str, e['loc'])) or 'arguments'}: {e['msg']}" for e in exc.errors()
            )
            return f"error: bad arguments for {call.name}: {problems}"
        try:
            if inspect.iscoroutinefunction(function):
                result = await function(**arguments)
            else:
                result = await anyio.to_thread.run_sync(
                    functools.partial(function, **arguments), abandon_on_cancel=True
                )
        except (Exception, SystemExit) as exc:
            return f"error: {call.name} raised {described(exc)}"
        try:
            text = result if isinstance(result, str) else _json(result)
        except (TypeError, ValueError) as exc:
            return f"error: {call.name} returned a result that is not JSON: {exc}"
        if len(text) > self.max_result_chars:
            left = len(text) - self.max_result_chars
            text = f"{text[: self.max_result_chars]}\n[... {left} more characters cut]"
        return text


def _json(value: Any) -> str:
    """`value` as JSON text: pydantic models, dataclasses and numpy values included."""

    def plain(item: Any) -> Any:
        if hasattr(item, "tolist"):  # numpy scalars and arrays
            return item.tolist()
        raise TypeError(f"{type(item).__name__} is not JSON")

    try:
        return pydantic_core.to_json(value, fallback=plain, inf_nan_mode="strings").decode()
    except pydantic_core.PydanticSerializationError as exc:
        raise TypeError(str(exc)) from exc
