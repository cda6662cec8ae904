"""The README's code runs as written."""

from __future__ import annotations

import re
from pathlib import Path

from agenthub.testing import check_env

README = Path(__file__).resolve().parents[2] / "README.md"


def example(lead_in: str) -> dict[str, object]:
    """Run the README's Python block that follows `lead_in`; return what it defined."""
    text = README.read_text(encoding="utf-8")
    found = re.search(re.escape(lead_in) + r"\n\n```python\n(.*?)```", text, re.DOTALL)
    assert found is not None, f"the README's example after {lead_in!r} moved"
    namespace: dict[str, object] = {}
    exec(compile(found[1], "README.md", "exec"), namespace)
    return namespace


def test_the_contract_example_passes_check_env() -> None:
    check_env(example("The contract:")["GuessNumberEnv"]())  # type: ignore[operator]


def test_the_tool_example_passes_check_env() -> None:
    env = example("A complete tool env:")["Calculator"]()  # type: ignore[operator]
    check_env(env)
    assert [t["function"]["name"] for t in env.tools] == ["add"]
