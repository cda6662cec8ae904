"""Finding the code in a model's reply."""

from __future__ import annotations

import ast
import re

__all__ = ["extract_code"]

_FENCE = re.compile(r"```[ \t]*([\w+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)
_PYTHON = {"python", "py", "python3", ""}


def extract_code(reply: str, entry_point: str | None = None) -> str | None:
    """The code in `reply`: a fenced block (the last Python one, preferring one that defines
    `entry_point`; an unclosed fence at the end counts), else the whole reply if it parses as
    Python statements. None when there is no code."""
    blocks: list[tuple[str, str]] = [
        (str(lang).lower(), str(body)) for lang, body in _FENCE.findall(reply)
    ]
    python = [body for lang, body in blocks if lang in _PYTHON and body.strip()]
    if python:
        if entry_point:
            defining = [b for b in python if re.search(rf"\bdef\s+{re.escape(entry_point)}\b", b)]
            if defining:
                return defining[-1]
        return python[-1]
    if blocks:
        return None  # only blocks in other languages
    return reply if _looks_like_code(reply) else None


def _looks_like_code(text: str) -> bool:
    if not text.strip():
        return False
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return False
    # A lone word or number parses as an expression; it is an answer, not a program.
    return any(
        not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant | ast.Name))
        for node in tree.body
    )
