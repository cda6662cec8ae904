"""verifiers' chat messages (pydantic models or dicts, content text or parts) and
agenthub's."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from agenthub._types import Message

_ROLES = {"system", "user", "assistant", "tool"}


def to_dict(message: Any) -> dict[str, Any]:
    if isinstance(message, Mapping):
        return dict(message)
    dumped: dict[str, Any] = message.model_dump()
    return dumped


def text_of(content: Any) -> str:
    """A message's content as text: text parts joined, other parts (images) left out."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    parts = (to_dict(part) for part in content)
    return "".join(str(part.get("text", "")) for part in parts if part.get("type") == "text")


def to_agenthub(messages: Iterable[Any]) -> list[Message]:
    converted = []
    for message in messages:
        data = to_dict(message)
        role = data.get("role")
        if role not in _ROLES:
            raise ValueError(f"verifiers message of role {role!r} has no agenthub equivalent")
        call_id = data.get("tool_call_id") if role == "tool" else None
        converted.append(
            Message(role=role, content=text_of(data.get("content")), tool_call_id=call_id)
        )
    return converted


def to_verifiers(messages: Sequence[Message]) -> list[dict[str, Any]]:
    return [m.model_dump() for m in messages]
