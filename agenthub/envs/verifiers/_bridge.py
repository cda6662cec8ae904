"""One verifiers rollout run by verifiers' own loop, with agenthub as its model.

verifiers drives a rollout itself: it asks a client for each reply, runs `env_response`, its
stop conditions and its rubric. The bridge hands it a client whose `get_response` puts the
prompt where agenthub reads it and waits for the reply agenthub sampled, so all of that runs
unchanged while agenthub owns generation."""

from __future__ import annotations

import asyncio
import functools
import importlib
import importlib.util
import itertools
import json
import time
from dataclasses import dataclass
from typing import Any

from agenthub._types import Message
from agenthub.envs._foreign import MissingExtraError, import_foreign
from agenthub.envs.verifiers._messages import to_agenthub
from agenthub.tools import parse_tool_calls

MODEL = "agenthub"


@dataclass(frozen=True)
class Ask:
    """verifiers asks for the model's reply to `prompt` (its whole message list), offering
    `tools` (OpenAI function schemas)."""

    prompt: list[Any]
    tools: list[dict[str, Any]]


@dataclass(frozen=True)
class Done:
    """The rollout ended and was scored: verifiers' `RolloutOutput`."""

    output: dict[str, Any]


def legacy() -> Any:
    """verifiers' classic API: `verifiers.legacy` in verifiers 0.3, the package itself before
    (0.1.14 to 0.2.x); verifiers 0.4 no longer has it (only `verifiers.v1`)."""
    try:
        return import_foreign("verifiers.legacy", env="verifiers", extra="verifiers")
    except MissingExtraError:
        vf = import_foreign("verifiers", env="verifiers", extra="verifiers")
    if importlib.util.find_spec("verifiers.envs") is not None:
        return vf
    raise MissingExtraError(
        f"the verifiers env runs verifiers' classic API (verifiers.legacy), which the "
        f"installed verifiers {getattr(vf, '__version__', '')} does not have: install the "
        "version agenthub was tested with (pip install 'agenthub[verifiers]'), or run a v1 "
        "taskset with the verifiers_v1 env"
    )


@functools.cache
def bridge_client_class() -> type[Any]:
    """A `verifiers` client class (made once, from the installed verifiers) whose replies come
    from agenthub instead of a model server."""
    vf = legacy()
    clients = importlib.import_module(f"{vf.__name__}.clients")
    types = importlib.import_module(f"{vf.__name__}.types")

    class BridgeClient(clients.Client):  # type: ignore[misc, name-defined]
        def __init__(self) -> None:
            super().__init__(object())
            self.asks: asyncio.Queue[tuple[list[Any], list[Any], asyncio.Future[str]]] = (
                asyncio.Queue(1)
            )
            self._ids = itertools.count()

        async def get_response(
            self, prompt: Any, model: str, sampling_args: Any, tools: Any = None, **kwargs: Any
        ) -> Any:
            reply: asyncio.Future[str] = asyncio.get_running_loop().create_future()
            await self.asks.put((list(prompt), [_schema(t) for t in tools or ()], reply))
            return _response(types, await reply, model, f"agenthub-{next(self._ids)}")

        # Never called: `get_response` above replaces the path through a native client.
        def setup_client(self, config: Any) -> Any:
            raise NotImplementedError

        async def to_native_tool(self, tool: Any) -> Any:
            raise NotImplementedError

        async def to_native_prompt(self, messages: Any) -> Any:
            raise NotImplementedError

        async def get_native_response(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError

        async def raise_from_native_response(self, response: Any) -> None:
            raise NotImplementedError

        async def from_native_response(self, response: Any) -> Any:
            raise NotImplementedError

        async def close(self) -> None:
            return None

    return BridgeClient


def _response(types: Any, text: str, model: str, response_id: str) -> Any:
    """A reply as verifiers' `Response`. Tool calls are read from the text as agenthub's own
    tool envs read them; a call that cannot be read is left out, as a model server would."""
    calls = [
        types.ToolCall(
            id=call.id or f"call_{n}", name=call.name, arguments=json.dumps(call.arguments)
        )
        for n, call in enumerate(parse_tool_calls(text))
        if call.error is None
    ]
    message = types.ResponseMessage(
        role="assistant",
        content=text,
        tool_calls=calls or None,
        finish_reason="tool_calls" if calls else "stop",
        is_truncated=False,
    )
    return types.Response(id=response_id, created=int(time.time()), model=model, message=message)


def _schema(tool: Any) -> dict[str, Any]:
    """A verifiers `Tool` as the OpenAI function schema agenthub shows the chat template."""
    function = {"name": tool.name, "description": tool.description}
    return {"type": "function", "function": {**function, "parameters": tool.parameters}}


class Rollout:
    """A verifiers rollout in progress, on a task of this event loop."""

    def __init__(self, env: Any, rollout_input: dict[str, Any]) -> None:
        self._client = bridge_client_class()()
        self._reply: asyncio.Future[str] | None = None
        self._task = asyncio.ensure_future(
            env.run_rollout(rollout_input, self._client, MODEL, {}, state_columns=[])
        )

    async def next(self) -> Ask | Done:
        """Wait until verifiers asks for a reply or the rollout ends; a rollout that raised
        raises here."""
        asked = asyncio.ensure_future(self._client.asks.get())
        try:
            await asyncio.wait({asked, self._task}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not asked.done():
                asked.cancel()
        if asked.done() and not asked.cancelled():
            prompt, tools, self._reply = asked.result()
            return Ask(prompt, tools)
        return Done(dict(self._task.result()))

    async def reply(self, text: str) -> Ask | Done:
        if self._reply is None or self._reply.done():
            raise RuntimeError("the verifiers rollout is not waiting for a reply")
        self._reply.set_result(text)
        return await self.next()

    async def aclose(self) -> None:
        if not self._task.done():
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)


def said_since(prompt: list[Any], seen: int) -> list[Message]:
    """The messages of `prompt` after the first `seen`: what is new to agenthub."""
    return to_agenthub(prompt[seen:])
