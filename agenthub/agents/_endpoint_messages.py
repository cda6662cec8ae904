"""OpenAI chat messages and tool calls, read from requests and written into replies."""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agenthub._types import Message
from agenthub.tools import parse_tool_calls

__all__ = ["RequestError", "Turn", "read_messages", "read_tools", "reply_turn"]

_OPEN = "<tool_call>"


class RequestError(ValueError):
    """A request the endpoint cannot serve; its message goes back to the program (HTTP 400)."""


@dataclass(frozen=True, slots=True)
class ToolCallSpec:
    """One call in OpenAI's form: `arguments` kept as canonical JSON so that a program that
    sends a call back with its JSON re-serialised still matches the reply it was given."""

    id: str
    name: str
    arguments: str

    def openai(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }


@dataclass(frozen=True, slots=True)
class Turn:
    """One chat message reduced to what the chat template sees, so two conversations compare
    equal exactly when they render alike (the extra fields an SDK adds, such as `refusal`,
    are dropped)."""

    role: str
    content: str
    tool_calls: tuple[ToolCallSpec, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None

    def message(self) -> Message:
        """The agenthub message the chat template renders. An assistant's tool calls are
        written into its text in the Hermes form the model itself writes them in
        (`<tool_call>{"name": ..., "arguments": {...}}</tool_call>`): templates that know no
        `tool_calls` field (the default model's) render them too."""
        content = self.content + "".join(
            _OPEN
            + json.dumps({"name": c.name, "arguments": json.loads(c.arguments)})
            + "</tool_call>"
            for c in self.tool_calls
        )
        role = "system" if self.role == "developer" else self.role
        return Message(
            role=role,
            content=content,
            name=self.name if role == "tool" else None,
            tool_call_id=self.tool_call_id,
        )

    def openai(self) -> dict[str, Any]:
        """The message as a chat completion's `choices[0].message`."""
        calls = [c.openai() for c in self.tool_calls]
        return {"role": self.role, "content": self.content or None, "tool_calls": calls or None}


def read_messages(body: Mapping[str, Any]) -> list[Turn]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError("`messages` must be a non-empty list of chat messages")
    return [_read_message(m, i) for i, m in enumerate(messages)]


def read_tools(body: Mapping[str, Any]) -> tuple[dict[str, Any], ...]:
    tools = body.get("tools") or []
    if not isinstance(tools, list):
        raise RequestError("`tools` must be a list of {'type': 'function', 'function': {...}}")
    for tool in tools:
        function = tool.get("function") if isinstance(tool, dict) else None
        if not (isinstance(function, dict) and isinstance(function.get("name"), str)):
            raise RequestError(
                f"tool {json.dumps(tool)[:100]} is not {{'type': 'function', 'function': "
                "{'name': ..., 'parameters': {...}}}"
            )
    return tuple(tools)


def reply_turn(text: str, parse_calls: bool) -> Turn:
    """The model's reply as an assistant message: with `parse_calls` (the request offered
    tools), its `<tool_call>` blocks become OpenAI `tool_calls` and the text before them the
    content. A reply with a call that does not parse is all content, as vLLM's server does."""
    if not (parse_calls and _OPEN in text):
        return Turn("assistant", text)
    calls = parse_tool_calls(text)
    if not calls or any(c.error is not None for c in calls):
        return Turn("assistant", text)
    specs = tuple(
        ToolCallSpec(f"call_{uuid.uuid4().hex[:24]}", c.name, _canonical(c.arguments))
        for c in calls
    )
    return Turn("assistant", text[: text.find(_OPEN)].strip(), specs)


def _read_message(message: Any, at: int) -> Turn:
    if not isinstance(message, dict):
        raise RequestError(f"messages[{at}] is not an object: {json.dumps(message)[:100]}")
    role = message.get("role")
    if role not in ("system", "developer", "user", "assistant", "tool"):
        raise RequestError(
            f"messages[{at}] has role {role!r}; send system, developer, user, assistant or tool"
        )
    calls = message.get("tool_calls") or []
    if role != "assistant" and calls:
        raise RequestError(f"messages[{at}] ({role}) has tool_calls; only assistant ones may")
    return Turn(
        role=role,
        content=_content(message.get("content"), at),
        tool_calls=tuple(_read_call(c, at) for c in calls),
        tool_call_id=_optional_str(message.get("tool_call_id")),
        name=_optional_str(message.get("name")),
    )


def _content(content: Any, at: int) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list):
        texts = [p.get("text") for p in content if isinstance(p, dict)]
        if len(texts) == len(content) and all(isinstance(t, str) for t in texts):
            return "".join(str(t) for t in texts)
    raise RequestError(
        f"messages[{at}] content must be text or a list of text parts "
        f"({{'type': 'text', 'text': ...}}), got {json.dumps(content)[:100]}"
    )


def _read_call(call: Any, at: int) -> ToolCallSpec:
    function = call.get("function") if isinstance(call, dict) else None
    if not (isinstance(function, dict) and isinstance(function.get("name"), str)):
        raise RequestError(f"messages[{at}] has a tool call without function.name: {call!r}")
    arguments = function.get("arguments") or "{}"
    try:
        parsed = json.loads(arguments) if isinstance(arguments, str) else arguments
    except json.JSONDecodeError as exc:
        message = f"messages[{at}] has tool call arguments that are not JSON: {exc}"
        raise RequestError(message) from exc
    if not isinstance(parsed, dict):
        raise RequestError(f"messages[{at}] has tool call arguments that are not an object")
    return ToolCallSpec(str(call.get("id") or ""), function["name"], _canonical(parsed))


def _canonical(arguments: Mapping[str, Any]) -> str:
    return json.dumps(arguments, ensure_ascii=False)


def _optional_str(value: Any) -> str | None:
    return None if value is None else str(value)
