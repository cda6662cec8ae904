"""`agenthub.integrations.verifiers.load_environment` run by verifiers' own evaluation loop
(`Environment.evaluate`), inside verifiers' venv (test_integration_verifiers.py). The model
is a scripted verifiers `Client`: a wrong answer first, then the task's own, so that the
rewards verifiers reports can be checked against what the env gives."""

from __future__ import annotations

import importlib
import itertools
from typing import Any

import pytest

import agenthub
from agenthub.envs.verifiers._bridge import _response, legacy
from agenthub.integrations.verifiers import load_environment

pytestmark = [pytest.mark.integration, pytest.mark.anyio]


def scripted_client(answers: dict[str, str]) -> Any:
    """A verifiers client answering `\\boxed{-1}` to a task's first turn and its answer,
    looked up by the task's prompt, after."""
    vf = legacy()
    clients = importlib.import_module(f"{vf.__name__}.clients")
    types = importlib.import_module(f"{vf.__name__}.types")

    class Scripted(clients.Client):  # type: ignore[misc, name-defined]
        def __init__(self) -> None:
            super().__init__(object())
            self.ids = itertools.count()

        async def get_response(
            self, prompt: Any, model: str, sampling_args: Any, tools: Any = None, **kw: Any
        ) -> Any:
            asked = next(m["content"] for m in prompt if m["role"] == "user")
            first = not any(m["role"] == "assistant" for m in prompt)
            text = "\\boxed{-1}" if first else f"\\boxed{{{answers[asked]}}}"
            return _response(types, text, model, f"scripted-{next(self.ids)}")

        def setup_client(self, config: Any) -> Any:
            raise NotImplementedError

        async def to_native_tool(self, tool: Any) -> Any:
            raise NotImplementedError

        async def to_native_prompt(self, messages: Any) -> Any:
            raise NotImplementedError

        async def get_native_response(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError

        async def raise_from_native_response(self, response: Any) -> None:
            raise NotImplementedError

        async def from_native_response(self, response: Any) -> Any:
            raise NotImplementedError

        async def close(self) -> None:
            return None

    return Scripted()


async def test_verifiers_evaluates_an_agenthub_multi_turn_env() -> None:
    env = load_environment("math", num_examples=3, max_attempts=2)
    assert isinstance(env, legacy().MultiTurnEnv)
    tasks = list(agenthub.make("math").tasks("held_out"))[:3]
    client = scripted_client({str(t.prompt): str(t.label) for t in tasks})
    results = await env.evaluate(client, "scripted", num_examples=3, max_concurrent=3)
    outputs = results["outputs"]
    assert len(outputs) == 3
    for output in outputs:
        assert output["error"] is None, output["error"]
        assert output["reward"] == 1.0 and output["metrics"]["agenthub_score"] == 1.0
        roles = [m["role"] for m in output["completion"]]
        assert roles == ["assistant", "user", "assistant"], roles
        assert str(output["completion"][1]["content"]).startswith("Incorrect, try again.")
        assert output["stop_condition"] == "has_final_env_response"


async def test_a_reply_that_never_solves_it_scores_the_env_s_zero() -> None:
    env = load_environment("math", num_examples=1)
    [task] = list(agenthub.make("math").tasks("held_out"))[:1]
    client = scripted_client({str(task.prompt): "-1"})
    [output] = (await env.evaluate(client, "scripted", num_examples=1))["outputs"]
    assert (output["reward"], output["metrics"]["agenthub_score"]) == (0.0, 0.0)
    assert [m["role"] for m in output["completion"]] == ["assistant"]
