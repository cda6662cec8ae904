from __future__ import annotations

import inspect
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Generic

import numpy as np
from pydantic import JsonValue, TypeAdapter, ValidationError

from agenthub._env import Env
from agenthub._spec import EnvSpec, WrapperSpec
from agenthub._types import ObsT, Step, Task

_NOT_SET: Any = object()
_json_kwargs = TypeAdapter(dict[str, JsonValue])


class Wrapper(Env[ObsT], Generic[ObsT]):
    """An environment that delegates to `env`; override only what the wrapper changes.

    Its `spec` is the wrapped env's with this wrapper added (its class and the arguments it was
    built with besides `env`), so `agenthub.make(wrapped.spec)` builds the same wrapped env
    anywhere (a rollout worker, an `EpisodeRunner`). A wrapper built with arguments that are
    not JSON still works; its spec says it cannot be built again.
    """

    _arguments: dict[str, Any] | None = None  # what it was built with besides env
    _spec: EnvSpec | None = _NOT_SET  # set when an entry point returned this wrapper

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        self = super().__new__(cls)
        self._arguments = _arguments(cls, args, kwargs)
        return self

    def __init__(self, env: Env[ObsT]) -> None:
        self.env = env

    async def reset(self, task: Task, *, seed: int | None = None) -> tuple[ObsT, dict[str, Any]]:
        return await self.env.reset(task, seed=seed)

    async def step(self, action: str) -> Step[ObsT]:
        return await self.env.step(action)

    async def aclose(self) -> None:
        await self.env.aclose()

    def tasks(self, split: str = "train") -> Iterable[Task]:
        return self.env.tasks(split)

    @property
    def spec(self) -> EnvSpec | None:
        if self._spec is not _NOT_SET:  # made by a registered factory: it wraps the env itself
            return self._spec
        inner = self.env.spec
        if inner is None:
            return None
        try:
            kwargs: dict[str, JsonValue] | None = _json_kwargs.validate_python(self._arguments)
        except ValidationError:  # None (built some other way), or not JSON
            kwargs = None
        cls = type(self)
        record = WrapperSpec(entry_point=f"{cls.__module__}:{cls.__qualname__}", kwargs=kwargs)
        return inner.model_copy(update={"wrappers": (*inner.wrappers, record)})

    @spec.setter
    def spec(self, value: EnvSpec | None) -> None:
        self._spec = value

    @property
    def tools(self) -> Sequence[Mapping[str, Any]]:
        return self.env.tools

    @tools.setter
    def tools(self, value: Sequence[Mapping[str, Any]]) -> None:
        self.env.tools = value

    @property
    def stop(self) -> Sequence[str]:
        return self.env.stop

    @stop.setter
    def stop(self, value: Sequence[str]) -> None:
        self.env.stop = value

    @property
    def system_prompt(self) -> str | None:
        return self.env.system_prompt

    @system_prompt.setter
    def system_prompt(self, value: str | None) -> None:
        self.env.system_prompt = value

    @property
    def np_random(self) -> np.random.Generator:
        return self.env.np_random

    def reseed(self, seed: int | None) -> None:
        self.env.reseed(seed)

    @property
    def unwrapped(self) -> Env[Any]:
        return self.env.unwrapped

    def __str__(self) -> str:
        return f"<{type(self).__name__}{self.env}>"


def _arguments(cls: type, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any] | None:
    """The arguments a `cls(*args, **kwargs)` call gives its constructor besides the env, by
    name; None where they have no names (`*args`) or do not fit it (the constructor says so)."""
    try:
        bound = inspect.signature(cls).bind(*args, **kwargs)
    except (TypeError, ValueError):
        return None
    named: dict[str, Any] = {}
    for position, (name, value) in enumerate(bound.arguments.items()):
        kind = bound.signature.parameters[name].kind
        if kind is inspect.Parameter.VAR_POSITIONAL:
            return None
        if kind is inspect.Parameter.VAR_KEYWORD:
            named.update(value)
        elif position:  # the first is the env
            named[name] = value
    return named
