"""The remote reward-model client and env against real HTTP servers on loopback."""

import anyio
import pytest

from agenthub import RewardModelError, Task, make
from agenthub.envs.reward_func import RemoteRewardModel

from ..rm_server import Script, reward_server

pytestmark = [pytest.mark.anyio, pytest.mark.integration]


async def test_env_scores_through_http_and_keeps_scores_and_logs() -> None:
    with reward_server() as (url, script):
        env = make("reward_func", remote_rm_url=url)
        await env.reset(Task(id="t", prompt="Q: ", label="x"))
        step = await env.step("abcd")
        await env.aclose()
    assert (step.reward, step.score, step.terminated) == (4.0, 0.4, True)
    assert set(step.extra_logs) == {"port"}
    assert script.requests == [{"query": ["Q: abcd"], "prompts": ["Q: "], "labels": ["x"]}]


async def test_server_failing_twice_then_answering_is_retried() -> None:
    with reward_server(Script(fail_first=2)) as (url, script):
        client = RemoteRewardModel(url, max_retries=3, backoff_s=0.01)
        out = await client.score(["pq"], ["p"], [None])
        await client.aclose()
    assert out.rewards == [1.0] and len(script.requests) == 3


async def test_server_that_never_answers_fails_in_bounded_time_with_a_clear_error() -> None:
    with reward_server(Script(hang_s=30)) as (url, script):
        client = RemoteRewardModel(url, timeout_s=0.3, max_retries=2, backoff_s=0.01)
        with pytest.raises(
            RewardModelError, match=r"did not answer after 3 attempts.*timeout 0.3 s"
        ):
            await client.score(["q"], ["p"], [None])
        # the client gave up on its own: three attempts made, and no answer ever came
        assert (len(script.requests), script.answered) == (3, 0)
        await client.aclose()


async def test_server_that_is_down_fails_with_a_clear_error() -> None:
    with reward_server() as (url, _):
        pass
    client = RemoteRewardModel(url, timeout_s=1, max_retries=1, backoff_s=0.01)
    with pytest.raises(RewardModelError, match="ConnectError.*Check that the server is running"):
        await client.score(["q"], ["p"], [None])
    await client.aclose()


async def test_client_errors_are_not_retried() -> None:
    with reward_server(Script(status=422, body='{"detail": "bad labels"}')) as (url, script):
        client = RemoteRewardModel(url, max_retries=3, backoff_s=0.01)
        with pytest.raises(RewardModelError, match="HTTP 422.*bad labels"):
            await client.score(["q"], ["p"], [None])
        await client.aclose()
    assert len(script.requests) == 1


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("not json", "non-JSON"),
        ('{"rewards": [1, 2]}', "returned 2 rewards for 1 samples"),
        ('{"scores": [1]}', "without 'rewards'"),
        ('{"rewards": ["high"]}', "finite number"),
    ],
)
async def test_unusable_answers_are_errors_not_zero(body: str, message: str) -> None:
    with reward_server(Script(body=body)) as (url, _):
        client = RemoteRewardModel(url, max_retries=0)
        with pytest.raises(RewardModelError, match=message):
            await client.score(["q"], ["p"], [None])
        await client.aclose()


async def test_batches_split_over_servers_without_empty_requests() -> None:
    with reward_server() as (a, sa), reward_server() as (b, sb), reward_server() as (c, sc):
        client = RemoteRewardModel([a, b, c])
        out = await client.score(["p1", "p22"], ["p", "p"], [1, 2])
        assert out.rewards == [1.0, 2.0]
        for _ in range(6):
            await client.score(["px"], ["p"], [0])
        await client.aclose()
    sizes = [len(r["query"]) for s in (sa, sb, sc) for r in s.requests]
    assert 0 not in sizes and sum(sizes) == 8
    assert all(len(s.requests) >= 2 for s in (sa, sb, sc)), "single samples rotate over servers"


async def test_concurrent_episodes_share_nothing_and_all_score() -> None:
    # The server answers only once all 20 requests are in flight together: episodes that
    # waited on it one after another would get errors instead of rewards.
    with reward_server(Script(together=20)) as (url, script):
        rewards: list[float] = []

        async def episode(i: int) -> None:
            env = make("reward_func", remote_rm_url=[url])
            await env.reset(Task(id=str(i), prompt="", label=None))
            rewards.append((await env.step("x" * i)).reward)
            await env.aclose()

        async with anyio.create_task_group() as group:
            for i in range(20):
                group.start_soon(episode, i)
    assert sorted(rewards) == [float(i) for i in range(20)]
    assert (len(script.requests), script.answered) == (20, 20)


async def test_episodes_with_an_env_each_spread_over_the_servers() -> None:
    with reward_server() as (a, sa), reward_server() as (b, sb):
        for i in range(4):
            env = make("reward_func", remote_rm_url=[a, b])
            await env.reset(Task(id=str(i), prompt="", label=None))
            await env.step("x")
            await env.aclose()
    assert len(sa.requests) == len(sb.requests) == 2
