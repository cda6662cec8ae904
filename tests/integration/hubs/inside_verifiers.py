"""The verifiers adapter on the real verifiers package, run inside verifiers' own venv by
test_verifiers.py (its pins differ from agenthub's). The environment is a classic
`MultiTurnEnv` with a `Rubric`, in tests/fixtures/hubs/vf_guess_color.py."""

from __future__ import annotations

import signal

import httpx
import pytest

import agenthub
from agenthub import Message
from agenthub.testing import check_env
from benchmarks._episode_counts import verifiers_failures

from ...conftest import FIXTURES

pytestmark = [pytest.mark.integration, pytest.mark.anyio]


@pytest.fixture(autouse=True)
def _environment_package(monkeypatch: pytest.MonkeyPatch) -> None:
    # As if installed: `vf.load_environment("vf_guess_color")` imports it by name.
    monkeypatch.syspath_prepend(str(FIXTURES / "hubs"))


async def test_a_multi_turn_env_runs_and_scores_through_verifiers_own_loop() -> None:
    env = agenthub.make("verifiers", env_id="vf_guess_color")
    task = next(iter(env.tasks("train")))
    assert [m.role for m in task.messages()] == ["system", "user"] and task.label == "green"
    observation, _ = await env.reset(task, seed=0)
    assert observation == []
    wrong = await env.step("red")
    assert [m.content for m in wrong.observation] == ["Not red. Try again."], "only what is new"
    assert not wrong.done and wrong.reward == 0.0
    right = await env.step("green")
    assert [m.content for m in right.observation] == ["Correct!"]
    assert (right.terminated, right.reward, right.score) == (True, 1.0, 1.0)
    assert right.extra_logs == {"correct": 1.0, "tries": 2.0, "num_turns": 2.0}
    assert right.info["stop_condition"] == "has_final_env_response"


async def test_the_env_s_own_stop_condition_ends_a_lost_episode() -> None:
    env = agenthub.make("verifiers", env_id="vf_guess_color", max_turns=2)
    await env.reset(next(iter(env.tasks("train"))))
    await env.step("red")
    last = await env.step("blue")
    assert last.terminated and last.score == 0.0 and last.reward == 0.0
    assert last.info["stop_condition"] == "max_turns_reached"


async def test_a_metric_chosen_as_the_score_and_the_eval_dataset_as_held_out() -> None:
    env = agenthub.make("verifiers", env_id="vf_guess_color", score_metric="tries")
    held_out = next(iter(env.tasks("held_out")))
    assert held_out.label == "black", "the env's eval_dataset, not its dataset"
    await env.reset(held_out)
    assert (await env.step("black")).score == 1.0


def test_building_keeps_agenthub_s_signal_handlers() -> None:
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    agenthub.make("verifiers", env_id="vf_guess_color", max_turns=5)
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before


async def test_a_tool_env_s_tools_are_offered_and_its_calls_read_from_the_reply() -> None:
    env = agenthub.make("verifiers", env_id="vf_calculator")
    await env.reset(next(iter(env.tasks("train"))))
    [tool] = env.tools
    assert tool["function"]["name"] == "add"
    assert tool["function"]["parameters"]["required"] == ["a", "b"]
    call = '<tool_call>{"name": "add", "arguments": {"a": 17, "b": 25}}</tool_call>'
    answered = await env.step(f"Let me add. {call}")
    assert answered.observation == [Message(role="tool", content="42", tool_call_id="call_0")]
    last = await env.step("The answer is 42.")
    assert (last.terminated, last.score) == (True, 1.0)
    assert last.extra_logs["add_calls"] == 1.0 and last.info["stop_condition"] == "no_tools_called"


def test_check_env_passes() -> None:
    for env_id in ("vf_guess_color", "vf_calculator"):
        agenthub.make("verifiers", env_id=env_id)  # built once, on this thread
        check_env(lambda env_id=env_id: agenthub.make("verifiers", env_id=env_id))


async def test_a_v1_taskset_runs_and_scores_through_its_own_tasks() -> None:
    env = agenthub.make("verifiers_v1", taskset="vf_v1_capitals")
    tasks = list(env.tasks("train"))
    assert len(tasks) == 3 and [m.role for m in tasks[0].messages()] == ["system", "user"]
    assert "capital of France" in tasks[0].messages()[1].content
    await env.reset(tasks[0], seed=0)
    right = await env.step(" Paris")
    assert (right.terminated, right.reward, right.score) == (True, 1.0, 1.0)
    assert right.extra_logs == {"correct": 1.0, "reply_words": 1.0}
    await env.reset(tasks[1], seed=0)
    wrong = await env.step("Kyoto, I think")
    assert (wrong.reward, wrong.score, wrong.extra_logs["reply_words"]) == (0.0, 0.0, 3.0)


def test_check_env_passes_on_a_v1_taskset() -> None:
    check_env(lambda: agenthub.make("verifiers_v1", taskset="vf_v1_capitals"))


def _chat_reply(request: httpx.Request) -> httpx.Response:
    """A chat-completions server that answers the red/green/blue task with nothing."""
    content = "" if b"red, green or blue" in request.content else "green"
    message = {"role": "assistant", "content": content}
    choice = {"index": 0, "finish_reason": "stop", "message": message}
    reply = {"id": "c", "object": "chat.completion", "created": 0, "model": "m"}
    return httpx.Response(200, json={**reply, "choices": [choice]})


async def test_vs_verifiers_counts_the_rollouts_verifiers_aborted_on_an_empty_reply() -> None:
    import verifiers as vf
    from openai import AsyncOpenAI

    env = vf.load_environment("vf_guess_color")
    http = httpx.AsyncClient(transport=httpx.MockTransport(_chat_reply))
    openai = AsyncOpenAI(base_url="http://chat.invalid/v1", api_key="none", http_client=http)
    results = await env.evaluate(
        vf.clients.OpenAIChatCompletionsClient(openai),
        "m",
        num_examples=3,
        rollouts_per_example=2,
        independent_scoring=True,
        on_progress=lambda *_: None,
    )
    outputs = results["outputs"]
    assert len(outputs) == 6, "an aborted rollout is still in the outputs"
    assert verifiers_failures(outputs) == {"EmptyModelResponseError": 2}
