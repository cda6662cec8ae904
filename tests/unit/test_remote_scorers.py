"""The clients of remote scorers (reward servers, LLM judges) against in-memory servers
(`httpx.MockTransport`): where requests go, what is retried, what a failure says."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

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
