"""The README's code runs as written."""

from __future__ import annotations

import re
from pathlib import Path

from agenthub.testing import check_env

README = Path(__file__).resolve().parents[2] / "README.md"


def test_the_contract_example_passes_check_env() -> None:
    text = README.read_text(encoding="utf-8")
    found = re.search(r"The contract:\n\n```python\n(.*?)```", text, re.DOTALL)
    assert found is not None, "the README's contract example moved"
    namespace: dict[str, object] = {}
    exec(compile(found[1], "README.md", "exec"), namespace)
    check_env(namespace["GuessNumberEnv"]())  # type: ignore[operator]


def test_the_tool_example_passes_check_env() -> None:
    text = README.read_text(encoding="utf-8")
    found = re.search(r"A complete tool env:\n\n```python\n(.*?)```", text, re.DOTALL)
    assert found is not None, "the README's tool env example moved"
    namespace: dict[str, object] = {}
    exec(compile(found[1], "README.md", "exec"), namespace)
    env = namespace["Calculator"]()  # type: ignore[operator]
    check_env(env)
    assert [t["function"]["name"] for t in env.tools] == ["add"]
