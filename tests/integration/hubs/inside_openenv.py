"""The openenv adapter on the real OpenEnv package, run inside OpenEnv's own venv by
test_openenv.py (its pins differ from agenthub's). The environment is
tests/fixtures/hubs/oe_guess_word.py, served by OpenEnv's own `create_app` on 127.0.0.1 and
run in-process."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest

import agenthub
from agenthub.testing import check_env

from ...conftest import FIXTURES

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

IN_PROCESS = {"env": "oe_guess_word:GuessWordEnvironment", "observation_field": "feedback"}


@pytest.fixture(autouse=True)
def _environment_module(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(FIXTURES / "hubs"))


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    """The environment served by uvicorn on a free loopback port, as OpenEnv deploys it."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, "PYTHONPATH": str(FIXTURES / "hubs")}
    command = [sys.executable, "-m", "uvicorn", "oe_guess_word:app", "--host", "127.0.0.1"]
    process = subprocess.Popen([*command, "--port", str(port)], env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.2)
        else:
            pytest.fail("the OpenEnv server did not answer /health within 60 s")
        yield url
    finally:
        process.terminate()
        process.wait(timeout=10)


async def win(env: agenthub.Env[object]) -> agenthub.Step[object]:
    """Play by bisection over the sorted words on the env's earlier/later hints."""
    task = next(iter(env.tasks("train")))
    [opening], _ = await env.reset(task, seed=0)
    words = sorted(opening.content.split(": ")[1].rstrip(".").split(", "))
    while True:
        guess = words[(len(words) - 1) // 2]
        step = await env.step(guess)
        if step.done:
            return step
        [message] = step.observation
        cut = words.index(guess)
        words = words[cut + 1 :] if "later" in message.content else words[:cut]


async def test_a_served_environment_plays_an_episode(server: str) -> None:
    env = agenthub.make("openenv", base_url=server, observation_field="feedback")
    last = await win(env)
    assert (last.terminated, last.reward, last.score) == (True, 1.0, 1.0)
    assert [m.content for m in last.observation] == ["Right!"]
    await env.aclose()


async def test_the_same_class_in_process_plays_the_same_episode() -> None:
    env = agenthub.make("openenv", **IN_PROCESS)
    last = await win(env)
    assert (last.terminated, last.reward, last.score) == (True, 1.0, 1.0)


async def test_without_an_observation_field_the_observation_is_its_json() -> None:
    env = agenthub.make("openenv", env="oe_guess_word:GuessWordEnvironment")
    [opening], _ = await env.reset(next(iter(env.tasks())))
    assert opening.content.startswith('{"feedback": "I am thinking of one of:')
    assert '"tries_left": 3' in opening.content


async def test_an_unreachable_server_fails_the_episode_naming_openenv() -> None:
    env = agenthub.make("openenv", base_url="http://127.0.0.1:9", timeout_s=2)
    with pytest.raises(agenthub.AgentHubError, match=r"^openenv .* while resetting"):
        await env.reset(next(iter(env.tasks())))


def test_check_env_passes(server: str) -> None:
    check_env(lambda: agenthub.make("openenv", num_tasks=2, **IN_PROCESS))
    check_env(lambda: agenthub.make("openenv", base_url=server, num_tasks=2, timeout_s=10))
