"""`agenthub serve` played by OpenEnv's own client (`GenericEnvClient`, as TRL, SkyRL and NeMo
Gym use it), run inside OpenEnv's venv by test_serve_openenv.py: `math`, a plugin env named
`module:Class` (tests/fixtures/hubs/ah_guess_number.py) and `code_exec` (its Docker sandbox),
each served by a real `agenthub serve` process."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest
from openenv.core.generic_client import GenericEnvClient

import agenthub

from ...conftest import FIXTURES

pytestmark = [pytest.mark.integration, pytest.mark.anyio]


@contextlib.contextmanager
def serve(*argv: str) -> Iterator[str]:
    """A real `agenthub serve` on a free loopback port, answering /health."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    paths = [str(FIXTURES / "hubs"), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    command = [sys.executable, "-m", "agenthub", "serve", *argv, "--port", str(port)]
    process = subprocess.Popen([*command, "--max-sessions", "4"], env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while not _healthy(url):
            assert process.poll() is None, "agenthub serve exited"
            assert time.monotonic() < deadline, "agenthub serve did not answer /health in 60 s"
            time.sleep(0.2)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=20)


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=1).status_code == 200
    except httpx.TransportError:
        return False


@pytest.fixture(scope="module")
def math_server() -> Iterator[str]:
    with serve("--env", "math", "max_attempts=2") as url:
        yield url


@pytest.fixture(scope="module")
def plugin_server() -> Iterator[str]:
    with serve("--env", "ah_guess_number:GuessNumberEnv") as url:
        yield url


async def test_openenv_s_client_plays_math_through_agenthub_serve(math_server: str) -> None:
    task = next(iter(agenthub.make("math").tasks("train")))
    async with GenericEnvClient(base_url=math_server) as client:
        opened = await client.reset(task_index=0, seed=1)
        assert opened.observation["prompt"][-1]["content"] == task.prompt
        wrong = await client.step({"message": "\\boxed{-1}"})
        assert (wrong.reward, wrong.done) == (0.0, False)
        assert wrong.observation["messages"][0]["content"].startswith("Incorrect")
        right = await client.step({"message": f"\\boxed{{{task.label}}}"})
        assert (right.reward, right.done, right.observation["score"]) == (1.0, True, 1.0)
        assert (await client.state())["step_count"] == 2
        with pytest.raises(RuntimeError, match="step before reset"):
            await client.step({"message": "\\boxed{1}"})


async def test_openenv_s_client_plays_a_plugin_env_by_bisection(plugin_server: str) -> None:
    async with GenericEnvClient(base_url=plugin_server) as client:
        for _ in range(2):  # two episodes, two tasks in the server's round
            await client.reset()
            low, high = 0, 15
            while True:
                guess = (low + high) // 2
                result = await client.step({"message": str(guess)})
                if result.done:
                    break
                hint = result.observation["messages"][0]["content"]
                low, high = (guess + 1, high) if hint == "higher" else (low, guess - 1)
            assert (result.reward, result.observation["terminated"]) == (1.0, True)


def test_openenv_s_sync_client_plays_code_exec_in_its_sandbox() -> None:
    with (
        serve("--env", "code_exec", "max_turns=1") as server,
        GenericEnvClient(base_url=server).sync() as client,
    ):
        opened = client.reset(task_index=0)
        assert "```python" in opened.observation["prompt"][-1]["content"]
        result = client.step({"message": "```python\nprint('not a solution')\n```"})
        assert result.done and result.observation["info"]["tests"] > 0
        assert result.reward == 0.0 and result.observation["score"] == 0.0
