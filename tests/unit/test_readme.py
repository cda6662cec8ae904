"""The README's code runs as written."""

from __future__ import annotations

import json
import re
from pathlib import Path

from agenthub.testing import check_env

README = Path(__file__).resolve().parents[2] / "README.md"


def example(lead_in: str, **defined: object) -> dict[str, object]:
    """Run the README's Python block that follows `lead_in`, with `defined` (what earlier
    blocks define) already there; return what it defined."""
    text = README.read_text(encoding="utf-8")
    found = re.search(re.escape(lead_in) + r"\n\n```python\n(.*?)```", text, re.DOTALL)
    assert found is not None, f"the README's example after {lead_in!r} moved"
    namespace: dict[str, object] = dict(defined)
    exec(compile(found[1], "README.md", "exec"), namespace)
    return namespace


def test_the_contract_example_passes_check_env() -> None:
    check_env(example("The contract:")["GuessNumberEnv"]())  # type: ignore[operator]


def test_the_tool_example_passes_check_env() -> None:
    env = example("A complete tool env:")["Calculator"]()  # type: ignore[operator]
    check_env(env)
    assert [t["function"]["name"] for t in env.tools] == ["add"]


def test_the_task_file_example_reads_each_split_from_the_file_given_for_it(
    tmp_path: Path,
) -> None:
    guess = example("The contract:")["GuessNumberEnv"]
    env_class = example("mapping itself:", GuessNumberEnv=guess)
    files = {}
    for split, secret in (("train", 3), ("held_out", 7)):
        path = tmp_path / f"{split}.jsonl"
        path.write_text(json.dumps({"prompt": "Guess my number (1-10).", "label": secret}) + "\n")
        files[split] = str(path)
    env = env_class["GuessFromFilesEnv"](**files)  # type: ignore[operator]
    [held_out] = env.tasks("held_out")
    assert held_out.label == 7 and held_out.id == "held_out-1"
    check_env(env)
