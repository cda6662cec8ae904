"""Where an OpenEnv environment runs: a server reached over its WebSocket (OpenEnv's own
`GenericEnvClient`), or an `Environment` instance in this process. Both answer with
OpenEnv's observation as a dict, its reward and its done flag."""

from __future__ import annotations

import importlib
import typing
from dataclasses import dataclass
from typing import Any, Protocol

from agenthub.envs._foreign import import_foreign


def openenv() -> Any:
    return import_foreign("openenv", env="openenv", extra="openenv")


@dataclass(frozen=True)
class Answer:
    observation: dict[str, Any]
    reward: float | None
    done: bool


class Session(Protocol):
    async def reset(self, **kwargs: Any) -> Answer: ...

    async def step(self, action: dict[str, Any]) -> Answer: ...

    async def aclose(self) -> None: ...


class ServerSession:
    """One WebSocket session on a running OpenEnv server (its own env instance there)."""

    def __init__(self, base_url: str, timeout_s: float) -> None:
        client = import_foreign("openenv.core.generic_client", env="openenv", extra="openenv")
        self._client = client.GenericEnvClient(
            base_url=base_url, connect_timeout_s=timeout_s, message_timeout_s=timeout_s
        )

    async def reset(self, **kwargs: Any) -> Answer:
        return _answer(await self._client.reset(**kwargs))

    async def step(self, action: dict[str, Any]) -> Answer:
        return _answer(await self._client.step(action))

    async def aclose(self) -> None:
        await self._client.close()


def _answer(result: Any) -> Answer:
    reward = None if result.reward is None else float(result.reward)
    return Answer(dict(result.observation or {}), reward, bool(result.done))


class InProcessSession:
    """An OpenEnv `Environment` built in this process, through its async methods."""

    def __init__(self, env_class: type[Any], action_class: type[Any]) -> None:
        self._env = env_class()
        self._action_class = action_class

    async def reset(self, **kwargs: Any) -> Answer:
        return _observed(await self._env.reset_async(**kwargs))

    async def step(self, action: dict[str, Any]) -> Answer:
        return _observed(await self._env.step_async(self._action_class.model_validate(action)))

    async def aclose(self) -> None:
        self._env.close()


def _observed(observation: Any) -> Answer:
    data = observation.model_dump()
    reward = data.pop("reward", None)
    done = bool(data.pop("done", False))
    return Answer(data, None if reward is None else float(reward), done)


def load_class(path: str, what: str) -> type[Any]:
    module, _, name = path.partition(":")
    if not name:
        raise ValueError(f"{what}={path!r} must name a class as 'package.module:Class'")
    found = getattr(importlib.import_module(module), name, None)
    if not isinstance(found, type):
        raise ValueError(f"{what}={path!r}: {module} has no class {name}")
    return found


def action_class_of(env_class: type[Any]) -> type[Any]:
    """The Action type an `Environment[ActT, ObsT, StateT]` subclass declares."""
    base = openenv().core.env_server.interfaces.Environment
    for klass in env_class.__mro__:
        for parent in getattr(klass, "__orig_bases__", ()):
            if typing.get_origin(parent) is base and typing.get_args(parent):
                action = typing.get_args(parent)[0]
                if isinstance(action, type):
                    return action
    raise ValueError(
        f"{env_class.__name__} does not declare its Action type as "
        "Environment[Action, Observation, State]: pass action=package.module:ActionClass"
    )
