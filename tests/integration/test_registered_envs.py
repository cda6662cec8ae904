"""`check_env` over every registered environment, built-in or installed plugin."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agenthub import list_envs, make
from agenthub.testing import check_env

from ..conftest import FIXTURES

pytestmark = pytest.mark.integration

# Arguments that built-in envs need to be checked (plugins must work with their defaults).
BUILTIN_ARGS: dict[str, dict[str, Any]] = {
    "reward_func": {
        "reward_func": str(FIXTURES / "reward_plain.py"),
        "dataset": str(FIXTURES / "tasks.jsonl"),
    },
    "code_exec": {"num_tasks": 2},
}


def test_every_builtin_env_has_check_arguments() -> None:
    builtins = {s.id for s in list_envs() if s.package == "agenthub"}
    assert builtins == set(BUILTIN_ARGS), "add the new built-in env to BUILTIN_ARGS"


@pytest.mark.parametrize("env_id", [s.id for s in list_envs()])
def test_registered_env_keeps_the_contract(env_id: str, tmp_path: Path) -> None:
    check_env(lambda: make(env_id, **BUILTIN_ARGS.get(env_id, {})))
