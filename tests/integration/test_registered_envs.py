"""`check_env` over every registered environment, built-in or installed plugin."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agenthub import list_envs, make
from agenthub.testing import check_env

from ..conftest import FIXTURES
from ..rm_server import reward_server

pytestmark = pytest.mark.integration

# Arguments that built-in envs need to be checked (plugins must work with their defaults).
BUILTIN_ARGS: dict[str, dict[str, Any]] = {
    "reward_func": {
        "reward_func": str(FIXTURES / "reward_plain.py"),
        "dataset": str(FIXTURES / "tasks.jsonl"),
    },
    "openrlhf_agent": {
        "agent_func": str(FIXTURES / "agent_func_new.py"),
        "dataset": str(FIXTURES / "tasks.jsonl"),
    },
    "math": {},
    "judge": {"rm_url": "set by _judge_server below", "dataset": str(FIXTURES / "tasks.jsonl")},
    "code_exec": {"num_tasks": 2},
    # adapters to other hubs: the environment they run
    "reasoning_gym": {"dataset": "basic_arithmetic", "size": 3},
    "textarena": {"env_id": "TowerOfHanoi-v0", "num_tasks": 2},
}
# Adapters whose packages pin versions ours exclude: check_env runs on them in venvs of their
# own (tests/integration/hubs), not in this one, where their packages are not installed.
OWN_VENV = {"gem", "verifiers", "verifiers_v1", "openenv"}
# Played by the runner through its endpoint, not step by step: its reset/step refuse
# (tests/unit/agents/test_agent_program.py tests it).
RUNNER_PLAYED = {"agent_program"}


@pytest.fixture(autouse=True, scope="module")
def _judge_server() -> Iterator[None]:
    # the judge env scores through a server: give it a live one on loopback
    with reward_server() as (url, _):
        BUILTIN_ARGS["judge"]["rm_url"] = url
        yield


def test_every_builtin_env_has_check_arguments() -> None:
    builtins = {s.id for s in list_envs() if s.package == "agenthub"}
    assert builtins == set(BUILTIN_ARGS) | OWN_VENV | RUNNER_PLAYED, (
        "add the new built-in env to BUILTIN_ARGS"
    )


@pytest.mark.parametrize(
    "env_id", [s.id for s in list_envs() if s.id not in OWN_VENV | RUNNER_PLAYED]
)
def test_registered_env_keeps_the_contract(env_id: str, tmp_path: Path) -> None:
    check_env(lambda: make(env_id, **BUILTIN_ARGS.get(env_id, {})))
