"""A Docker engine lost under code_exec episodes: the episodes it hit fail as `env_error` with a
message naming the engine, never score a zero; the runner goes on with the next episodes."""

from __future__ import annotations

import itertools

import pytest

import agenthub
from agenthub.agents import ChatTokenizer, EpisodeRunner, FakeEngine, RolloutConfig
from agenthub.envs.code_exec import CodeExecEnv
from agenthub.sandbox import ExecResult, ExecStatus, FakeSandbox, SandboxEngineError
from agenthub.sandbox._fake import SandboxRequest, run_in_subprocess
from tests.code_tasks import function_task

pytestmark = pytest.mark.anyio

ENV = "agents-test-code-exec-engine-gap"
ADD = function_task("add", "assert add(1, 2) == 3")
LOST = ExecResult(
    ExecStatus.ENGINE_LOST,
    detail="the Docker engine stopped answering or restarted (lost the container's supervisor)",
)


async def test_an_engine_lost_run_raises_an_error_naming_the_engine_and_what_to_do() -> None:
    env = CodeExecEnv(sandbox=FakeSandbox(lambda request: LOST), max_turns=2)
    await env.reset(ADD, seed=0)
    with pytest.raises(SandboxEngineError) as raised:
        await env.step("```python\ndef add(a, b):\n    return a + b\n```")
    message = str(raised.value)
    assert "the Docker engine was lost" in message and "not the model's fault" in message
    assert "docker info" in message and "reconnect" in message
    await env.aclose()


_runs = itertools.count()


def engine_gap(request: SandboxRequest) -> ExecResult:
    """The second and third runs meet the engine's gap; later ones run on the reconnected pool."""
    return LOST if next(_runs) in (1, 2) else run_in_subprocess(request)


def gap_env() -> CodeExecEnv:
    return CodeExecEnv(sandbox=FakeSandbox(engine_gap), max_turns=1)


async def test_episodes_that_meet_a_lost_engine_end_as_env_error_and_the_rest_score(
    chat: ChatTokenizer,
) -> None:
    global _runs
    _runs = itertools.count()
    agenthub.register(ENV, f"{__name__}:gap_env", override=True)
    reply = chat.encode_text("```python\ndef add(a, b):\n    return a + b\n```")
    engine = FakeEngine(lambda prompt: [*reply, chat.closing_ids[0]])
    runner = EpisodeRunner(engine, chat, ENV, RolloutConfig(concurrency=1, n_samples_per_prompt=1))
    trajectories = [await runner.run_episode(ADD, sample=i) for i in range(4)]
    errors = [t.error for t in trajectories]
    assert [e is None for e in errors] == [True, False, False, True], errors
    for error in errors[1:3]:
        assert error is not None and error.cause == "env_error"
        assert "SandboxEngineError" in error.message and "Docker engine" in error.message
    assert [t.reward for t in (trajectories[0], trajectories[3])] == [1.0, 1.0]
