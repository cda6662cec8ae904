"""Reading tool calls out of a model's reply text."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ToolCall", "parse_tool_calls"]

_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
_OPEN = "<tool_call>"
_THINKING = re.compile(r"<think>.*?</think>", re.DOTALL)


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One call the model wrote: the function's name and its arguments. `error` says why a
    call could not be read (its JSON is broken, it names no function, ...); the env answers
    such a call with the error, so the model can learn to write calls that work."""

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    id: str | None = None
    """The call's id, when the model wrote one (`"id": ...`): the answer's `tool_call_id`."""


def parse_tool_calls(text: str) -> list[ToolCall]:
    """The calls in `text`, in order: each `<tool_call>{"name": ..., "arguments": {...}}
    </tool_call>` block (the Hermes form, which Qwen2.5/Qwen3 and the default model's chat
    template describe). `arguments` may also be given as a JSON string or as `parameters`. A
    `<tool_call>` left open at the end of the text is read as a call with an error. Calls
    inside `<think>...</think>` reasoning are the model thinking aloud and are not read."""
    text = _THINKING.sub("", text)
    calls = [_read(body) for body in _CALL.findall(text)]
    tail = _CALL.sub("", text)
    if _OPEN in tail:
        calls.append(
            ToolCall(name="", error="the tool call is not closed: end it with </tool_call>")
        )
    return calls


def _read(body: str) -> ToolCall:
    try:
        call = json.loads(body)
    except json.JSONDecodeError as exc:
        return ToolCall(name="", error=f"the tool call is not valid JSON: {exc}")
    if not isinstance(call, dict) or not isinstance(call.get("name"), str) or not call["name"]:
        return ToolCall(
            name="",
            error='the tool call must be a JSON object {"name": ..., "arguments": {...}}',
        )
    name = call["name"]
    call_id = str(call["id"]) if call.get("id") is not None else None
    arguments = call.get("arguments", call.get("parameters", {}))
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError as exc:
            return ToolCall(name, error=f"the arguments are not valid JSON: {exc}", id=call_id)
    if not isinstance(arguments, dict):
        kind = type(arguments).__name__
        return ToolCall(name, error=f"the arguments must be a JSON object, got {kind}", id=call_id)
    return ToolCall(name, arguments, id=call_id)
