"""`KEY=VALUE` arguments, read the same way by every command and config that takes them."""

from __future__ import annotations

import json
from typing import Any

from agenthub._errors import AgentHubError

__all__ = ["parse_pair"]


def parse_pair(pair: str) -> tuple[str, Any]:
    """`KEY=VALUE`, the value as JSON when it parses (numbers, booleans, lists), else text."""
    key, sep, raw = pair.partition("=")
    if not sep or not key:
        raise AgentHubError(f"argument {pair!r} must look like KEY=VALUE")
    try:
        return key.strip(), json.loads(raw)
    except json.JSONDecodeError:
        return key.strip(), raw
