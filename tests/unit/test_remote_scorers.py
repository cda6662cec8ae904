"""The clients of remote scorers (reward servers, LLM judges) against in-memory servers
(`httpx.MockTransport`): where requests go, what is retried, what a failure says."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from typing import Any

import anyio
import httpx
import pytest

from agenthub import EnvArgumentsError, RewardModelError, Task, make
from agenthub.envs.judge import JudgeError, LLMJudge
from agenthub.envs.reward_func import RemoteRewardModel

from ..judge_server import JudgeScript, judge_server
from ..rm_server import reward_server

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


# --- batching


def refuses_bad(answer: httpx.Response) -> Handler:
    """A reward server that gives `answer` to a request holding the query "bad"."""

    def handle(request: httpx.Request) -> httpx.Response:
        return (
            answer if "bad" in json.loads(request.content)["query"] else rewards_by_length(request)
        )

    return handle


async def score_together(rm: RemoteRewardModel, queries: list[str]) -> dict[str, float | str]:
    outcomes: dict[str, float | str] = {}

    async def one(query: str) -> None:
        try:
            outcomes[query] = (await rm.score_batched(query, "", "")).rewards[0]
        except RewardModelError as exc:
            outcomes[query] = str(exc)

    async with anyio.create_task_group() as group:
        for query in queries:
            group.start_soon(one, query)
    return outcomes


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (httpx.Response(500, text="cannot score 'bad'"), "cannot score 'bad'"),
        (httpx.Response(422, text="bad label"), "HTTP 422: bad label"),
        (httpx.Response(200, text="<html>"), "non-JSON"),
        (httpx.Response(200, json={"rewards": ["high"]}), "finite number"),
    ],
)
async def test_a_sample_the_server_refuses_fails_alone_not_its_batch(
    answer: httpx.Response, message: str
) -> None:
    seen: list[httpx.Request] = []
    transport = recording(refuses_bad(answer), seen)
    rm = RemoteRewardModel(
        "http://rm.test/get_reward", max_retries=0, batch_window_s=0.05, transport=transport
    )
    outcomes = await score_together(rm, ["good", "bad", "fine"])
    await rm.aclose()
    assert (outcomes["good"], outcomes["fine"]) == (4.0, 4.0)
    assert message in str(outcomes["bad"])
    assert [len(json.loads(r.content)["query"]) for r in seen] == [3, 1, 1, 1]


def _refuse(request: httpx.Request) -> httpx.Response:
    raise httpx.ConnectError("connection refused")


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        (_refuse, "could not be reached"),
        (lambda request: httpx.Response(429, text="slow down"), "HTTP 429"),
        (lambda request: httpx.Response(503, text="overloaded"), "HTTP 503"),
    ],
)
async def test_a_batch_that_got_no_answer_is_not_sent_again_sample_by_sample(
    answer: Any, said: str
) -> None:
    # Sending each sample of a batch alone would only multiply the wait, or the load on a
    # server that asked to be sent less.
    seen: list[httpx.Request] = []
    transport = recording(answer, seen)
    rm = RemoteRewardModel(
        "http://down.test/get_reward", max_retries=1, backoff_s=0.001, batch_window_s=0.05,
        transport=transport,
    )  # fmt: skip
    outcomes = await score_together(rm, ["a", "b", "c"])
    await rm.aclose()
    assert all(said in str(o) for o in outcomes.values())
    assert len(seen) == 2, "one batch, retried once"


# --- URLs


async def test_a_redirect_is_followed_with_the_same_request() -> None:
    seen: list[httpx.Request] = []

    def slash_redirects(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/"):
            return httpx.Response(307, headers={"Location": "/get_reward"})
        return rewards_by_length(request)

    rm = RemoteRewardModel("http://rm.test/get_reward/", transport=recording(slash_redirects, seen))
    assert (await rm.score(["qq"], ["p"], [""])).rewards == [2.0]
    await rm.aclose()
    assert [(r.method, r.url.path, r.content) for r in seen][1:] == [
        ("POST", "/get_reward", seen[0].content)
    ]


async def test_urls_may_be_given_comma_separated_as_openrlhf_takes_them() -> None:
    seen: list[httpx.Request] = []
    urls = "http://comma-a.test/get_reward, http://comma-b.test/get_reward"
    rm = RemoteRewardModel(urls, transport=recording(rewards_by_length, seen))
    assert (await rm.score(["q", "qq"], ["", ""], ["", ""])).rewards == [1.0, 2.0]
    await rm.aclose()
    assert sorted(r.url.host for r in seen) == ["comma-a.test", "comma-b.test"]


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (
            {"remote_rm_url": "127.0.0.1:8000/get_reward"},
            "remote_rm_url: '127.0.0.1:8000/get_reward' is not an HTTP URL; write it as "
            "http://host:5000/get_reward",
        ),
        ({"remote_rm_url": ["http://rm.test/get_reward", "rm.py"]}, "reward_func='rm.py'"),
        ({"remote_rm_url": "http://rm.test/get_reward,rm.py"}, "reward_func='rm.py'"),
        ({"remote_rm_url": "http://rm.test/get_reward,"}, None),
    ],
)
def test_reward_server_urls_are_checked_when_the_env_is_made(
    arguments: dict[str, Any], message: str | None
) -> None:
    if message is None:
        make("reward_func", **arguments)
        return
    with pytest.raises(EnvArgumentsError) as raised:
        make("reward_func", **arguments)
    assert message in str(raised.value)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"rm_url": "localhost:5000"}, "rm_url: 'localhost:5000' is not an HTTP URL"),
        ({"rm_url": ["rm.py"]}, "a Python file, not a URL"),
        (
            {"judge_url": "ftp://judge.test/v1", "judge_model": "m"},
            "judge_url: 'ftp://judge.test/v1' is not an HTTP URL; write it as http://host:8000/v1",
        ),
    ],
)
def test_judge_urls_are_checked_when_the_env_is_made(
    arguments: dict[str, Any], message: str
) -> None:
    with pytest.raises(EnvArgumentsError, match=re.escape(message)):
        make("judge", **arguments)


# --- the judge env


async def test_a_task_without_a_label_is_sent_to_a_reward_model_as_an_empty_label() -> None:
    with reward_server() as (url, script):
        env = make("judge", rm_url=url, cache_size=0)
        await env.reset(Task(id="t", prompt="P", label=None))
        await env.step("x")
        await env.aclose()
    assert script.requests[0]["labels"] == [""], "as OpenRLHF and the reward_func env send it"


def llm_judge(url: str, **kwargs: Any) -> Any:
    return make("judge", judge_url=url, judge_model="m", max_retries=0, cache_size=0, **kwargs)


async def test_the_judge_reply_budget_is_an_argument_and_a_cut_reply_says_so() -> None:
    cut = json.dumps(chat_reply(None, finish_reason="length"))
    with judge_server(JudgeScript(body=cut)) as (url, script):
        env = llm_judge(url, judge_max_tokens=64)
        await env.reset(Task(id="t", prompt="P"))
        with pytest.raises(JudgeError) as raised:
            await env.step("good")
        await env.aclose()
    assert script.requests[0]["max_tokens"] == 64
    assert "cut at max_tokens (64)" in str(raised.value)
    assert "judge_max_tokens" in str(raised.value)
    assert "OpenAI-compatible" not in str(raised.value)


def test_a_rubric_that_never_shows_the_response_is_refused() -> None:
    with pytest.raises(EnvArgumentsError, match=r"no \{response\} placeholder.*\{prompt\}"):
        llm_judge("http://judge.test/v1", rubric="Grade the answer to {prompt}.")
