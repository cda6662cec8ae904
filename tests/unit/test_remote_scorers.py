"""The clients of remote scorers (reward servers, LLM judges) against in-memory servers
(`httpx.MockTransport`): where requests go, what is retried, what a failure says."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from agenthub import RewardModelError
from agenthub.envs.judge import LLMJudge
from agenthub.envs.reward_func import RemoteRewardModel

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]

Handler = Callable[[httpx.Request], httpx.Response]


def rewards_by_length(request: httpx.Request) -> httpx.Response:
    """A reward server: each query's reward is its length."""
    body = json.loads(request.content)
    return httpx.Response(200, json={"rewards": [float(len(q)) for q in body["query"]]})


def chat_reply(content: str | None, finish_reason: str = "stop") -> dict[str, Any]:
    message = {"role": "assistant", "content": content}
    return {"choices": [{"index": 0, "message": message, "finish_reason": finish_reason}]}


def recording(handler: Handler, seen: list[httpx.Request]) -> httpx.MockTransport:
    def record(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return handler(request)

    return httpx.MockTransport(record)


# --- several URLs


async def test_single_samples_rotate_over_the_urls_across_clients() -> None:
    """An env is built per episode: the rotation must not start over with each client."""
    seen: list[httpx.Request] = []
    transport = recording(rewards_by_length, seen)
    urls = ["http://rotate-a.test/get_reward", "http://rotate-b.test/get_reward"]
    for _ in range(4):
        client = RemoteRewardModel(urls, transport=transport)
        await client.score(["q"], ["p"], [""])
        await client.aclose()
    for _ in range(4):
        client = RemoteRewardModel(urls, transport=transport)
        await client.score_batched("q", "p", "")
        await client.aclose()
    hosts = [r.url.host for r in seen]
    assert hosts.count("rotate-a.test") == hosts.count("rotate-b.test") == 4


async def test_llm_judge_requests_rotate_over_the_urls_across_clients() -> None:
    seen: list[httpx.Request] = []
    transport = recording(lambda r: httpx.Response(200, json=chat_reply("score: 5")), seen)
    for _ in range(4):
        judge = LLMJudge(
            ["http://judge-a.test/v1", "http://judge-b.test/v1"], "m", transport=transport
        )
        assert (await judge.judge("p", "r")).score == 5
        await judge.aclose()
    hosts = [r.url.host for r in seen]
    assert hosts.count("judge-a.test") == hosts.count("judge-b.test") == 2


# --- what is retried, and what a failure says


def scripted(*answers: httpx.Response | Exception) -> tuple[httpx.MockTransport, list[float]]:
    """A server giving `answers` in turn (an exception: no answer), then rewards; and the
    times of the requests."""
    times: list[float] = []
    queue = list(answers)

    def handle(request: httpx.Request) -> httpx.Response:
        times.append(time.monotonic())
        if not queue:
            return rewards_by_length(request)
        answer = queue.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    return httpx.MockTransport(handle), times


def client(transport: httpx.MockTransport, **kwargs: Any) -> RemoteRewardModel:
    policy = {"timeout_s": 5.0, "max_retries": 1, "backoff_s": 0.001, **kwargs}
    return RemoteRewardModel("http://rm.test/get_reward", transport=transport, **policy)


async def failure(transport: httpx.MockTransport, **kwargs: Any) -> str:
    rm = client(transport, **kwargs)
    with pytest.raises(RewardModelError) as raised:
        await rm.score(["q"], ["p"], [""])
    await rm.aclose()
    return str(raised.value)


async def test_a_server_answering_errors_is_quoted_not_called_unreachable() -> None:
    oom = httpx.Response(500, text='{"detail": "CUDA out of memory. Tried to allocate 2 GiB"}')
    message = await failure(scripted(oom, oom)[0])
    assert message.startswith("reward server answered 2 attempts with an error status: ")
    assert 'HTTP 500: \'{"detail": "CUDA out of memory. Tried to allocate 2 GiB"}\'' in message
    assert "did not answer" not in message and "running and reachable" not in message
    once = await failure(scripted(oom)[0], max_retries=0)
    assert "answered 1 attempt with an error status" in once


async def test_a_failure_is_worded_by_what_happened() -> None:
    refused = httpx.ConnectError("All connection attempts failed.")
    message = await failure(scripted(refused, refused)[0])
    assert message.startswith("reward server could not be reached in 2 attempts: ")
    assert message.endswith("Check that the server is running and reachable at that URL.")
    assert ".." not in message
    slow = httpx.ReadTimeout("timed out")
    message = await failure(scripted(slow, slow)[0], timeout_s=2.5)
    assert message.startswith("reward server did not answer after 2 attempts (timeout 2.5 s each)")
    assert "Raise the timeout" in message and "running and reachable" not in message
    message = await failure(scripted(slow, httpx.Response(503, text="overloaded"))[0])
    assert message.startswith("reward server failed 2 attempts (timeout 5 s each): ")
    assert "ReadTimeout timed out; " in message and "HTTP 503: 'overloaded'" in message


@pytest.mark.parametrize("status", [408, 429])
async def test_too_many_requests_and_request_timeout_are_retried_after_the_asked_delay(
    status: int,
) -> None:
    transport, times = scripted(httpx.Response(status, headers={"Retry-After": "0.3"}))
    rm = client(transport)
    assert (await rm.score(["qq"], ["p"], [""])).rewards == [2.0]
    await rm.aclose()
    assert len(times) == 2 and times[1] - times[0] >= 0.3


async def test_a_long_retry_after_is_capped_at_the_timeout() -> None:
    transport, times = scripted(httpx.Response(429, headers={"Retry-After": "3600"}))
    rm = client(transport, timeout_s=0.2)
    assert (await rm.score(["qq"], ["p"], [""])).rewards == [2.0]
    await rm.aclose()
    assert 0.2 <= times[1] - times[0] < 2
