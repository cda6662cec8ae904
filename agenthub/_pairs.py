"""`KEY=VALUE` arguments, read the same way by every command (env arguments) and by the
trainer's config overrides."""

from __future__ import annotations

import json
from typing import Any

from agenthub._errors import AgentHubError

__all__ = ["parse_kwargs", "parse_pair"]


def parse_pair(pair: str) -> tuple[str, Any]:
    """`KEY=VALUE`, the value as JSON when it parses (numbers, booleans, lists), else text."""
    key, sep, raw = pair.partition("=")
    if not sep or not key:
        raise AgentHubError(f"argument {pair!r} must look like KEY=VALUE")
    try:
        return key.strip(), json.loads(raw)
    except json.JSONDecodeError:
        return key.strip(), raw


def parse_kwargs(pairs: list[str]) -> dict[str, Any]:
    return dict(parse_pair(pair) for pair in pairs)
