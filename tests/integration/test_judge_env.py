"""The judge env against real servers on loopback: an OpenAI-compatible chat judge and
OpenRLHF reward servers, well-behaved and not."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from agenthub import AgentHubError, RewardModelError, Task, Transcript, make
from agenthub._transcript import stepping
from agenthub.envs.judge import JudgeError
from agenthub.testing import check_env

from ..judge_server import JudgeScript, judge_server
from ..rm_server import Script, reward_server

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

TASK = Task(id="t", prompt="Say something.", label="anything")
# A request's timeout far above a busy machine's stalls: one timed out would be retried, and the
# tests count requests. The tests of a judge too slow to answer set their own short one.
FAST = {"timeout_s": 10, "max_retries": 2, "backoff_s": 0.01, "cache_size": 0}


def llm(url: str, **kwargs: Any) -> Any:
    return make("judge", judge_url=url, judge_model="judge-1", **{**FAST, **kwargs})


async def judged(env: Any, response: str, task: Task = TASK) -> Any:
    await env.reset(task)
    try:
        return await env.step(response)
    finally:
        await env.aclose()


def test_llm_judge_env_keeps_the_contract(fixtures: Path) -> None:
    with judge_server() as (url, _):
        check_env(lambda: llm(url, dataset=str(fixtures / "tasks.jsonl")))


def test_reward_model_judge_env_keeps_the_contract(fixtures: Path) -> None:
    with reward_server() as (url, _):
        check_env(lambda: make("judge", rm_url=url, dataset=str(fixtures / "tasks.jsonl")))


@pytest.mark.anyio
async def test_llm_judge_scores_are_scaled_to_rewards_and_logged() -> None:
    with judge_server() as (url, script):
        good = await judged(llm(url), "a good answer")
        poor = await judged(llm(url), "meh")
    assert (good.reward, good.terminated, good.extra_logs["judge_score"]) == (0.9, True, 9.0)
    assert good.info == {"reason": "r9"} and poor.reward == 0.2
    sent = script.requests[0]
    assert sent["model"] == "judge-1" and sent["temperature"] == 0.0
    assert "Say something." in sent["messages"][0]["content"]
    assert "anything" in sent["messages"][0]["content"], "the label is the reference answer"


@pytest.mark.anyio
async def test_llm_judge_500_then_200_is_retried() -> None:
    with judge_server(JudgeScript(fail_first=2)) as (url, script):
        step = await judged(llm(url), "good")
    assert step.reward == 0.9 and len(script.requests) == 3


@pytest.mark.anyio
async def test_llm_judge_that_is_down_is_a_typed_error_in_bounded_time() -> None:
    with judge_server() as (url, _):
        pass
    start = time.monotonic()
    with pytest.raises(JudgeError, match="could not be reached in 3 attempts.*ConnectError"):
        await judged(llm(url), "good")
    assert time.monotonic() - start < 30


@pytest.mark.anyio
async def test_llm_judge_slower_than_the_timeout_is_a_typed_error_in_bounded_time() -> None:
    with judge_server(JudgeScript(hang_s=20)) as (url, script):
        start = time.monotonic()
        with pytest.raises(JudgeError, match=r"did not answer after 3 attempts \(timeout 0.5 s"):
            await judged(llm(url, timeout_s=0.5), "good")
        assert time.monotonic() - start < 15
        assert len(script.requests) == 3


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("script", "message"),
    [
        (JudgeScript(body="<html>oops</html>"), "answered non-JSON"),
        (JudgeScript(body='{"choices": []}'), "without choices"),
        (JudgeScript(content="It is fine, I suppose."), "holds no score"),
        (JudgeScript(content='{"score": 42}'), "outside"),
        (JudgeScript(status=401, body='{"error": "bad key"}'), "HTTP 401.*bad key"),
    ],
)
async def test_llm_judge_garbage_is_a_typed_error_not_zero(
    script: JudgeScript, message: str
) -> None:
    with judge_server(script) as (url, _), pytest.raises(JudgeError, match=message):
        await judged(llm(url), "good")
    assert len(script.requests) == 1, "garbage and 4xx answers are not retried"


@pytest.mark.anyio
async def test_one_failing_episode_does_not_stop_the_others() -> None:
    """What the episode runner relies on: errors stay with their episode, in bounded time."""
    good_server = judge_server(JudgeScript(hang_s=0.05))
    bad_server = judge_server(JudgeScript(content="no idea"))
    with good_server as (good_url, _), bad_server as (bad_url, _):
        outcomes: dict[int, float | str] = {}

        async def episode(i: int) -> None:
            env = llm(bad_url if i % 4 == 0 else good_url)
            try:
                outcomes[i] = (await judged(env, "good")).reward
            except AgentHubError as exc:
                outcomes[i] = type(exc).__name__

        async with anyio.create_task_group() as group:
            for i in range(12):
                group.start_soon(episode, i)
    assert outcomes == {i: "JudgeError" if i % 4 == 0 else 0.9 for i in range(12)}


@pytest.mark.anyio
async def test_identical_requests_are_answered_from_the_cache() -> None:
    with judge_server() as (url, script):
        first = await judged(llm(url, cache_size=16), "good one")
        again = await judged(llm(url, cache_size=16), "good one")
        other = await judged(llm(url, cache_size=16), "other")
    assert (first.reward, again.reward, other.reward) == (0.9, 0.9, 0.2)
    assert len(script.requests) == 2


@pytest.mark.anyio
async def test_failures_are_not_cached() -> None:
    with judge_server(JudgeScript(fail_first=1)) as (url, script):
        with pytest.raises(JudgeError):
            await judged(llm(url, cache_size=16, max_retries=0), "good")
        assert (await judged(llm(url, cache_size=16, max_retries=0), "good")).reward == 0.9
    assert len(script.requests) == 2


@pytest.mark.anyio
async def test_concurrency_is_limited_across_env_instances() -> None:
    with judge_server(JudgeScript(hang_s=0.1)) as (url, script):
        async with anyio.create_task_group() as group:
            for i in range(10):
                group.start_soon(judged, llm(url, max_concurrency=3, timeout_s=30), f"good {i}")
    assert len(script.requests) == 10 and script.max_active <= 3


@pytest.mark.anyio
async def test_requests_per_minute_spaces_requests() -> None:
    with judge_server() as (url, script):
        start = time.monotonic()
        for i in range(4):
            await judged(llm(url, requests_per_minute=600, timeout_s=30), f"good {i}")
        elapsed = time.monotonic() - start
    assert len(script.requests) == 4 and elapsed >= 0.3  # three gaps of 0.1 s at least


# --- reward-model mode (OpenRLHF /get_reward)


def rm(url: str | list[str], **kwargs: Any) -> Any:
    return make("judge", rm_url=url, **{**FAST, **kwargs})


@pytest.mark.anyio
async def test_concurrent_episodes_are_batched_into_few_requests() -> None:
    with reward_server(Script(hang_s=0.05)) as (url, script):
        rewards: dict[int, float] = {}

        async def episode(i: int) -> None:
            env = rm(url, timeout_s=30, max_concurrency=2)
            await env.reset(Task(id=str(i), prompt="P", label=i))
            rewards[i] = (await env.step("x" * i)).reward
            await env.aclose()

        async with anyio.create_task_group() as group:
            for i in range(40):
                group.start_soon(episode, i)
    assert rewards == {i: float(i) for i in range(40)}, "each sample gets its own reward back"
    assert len(script.requests) < 10
    sent = sorted(label for r in script.requests for label in r["labels"])  # type: ignore[type-var]
    assert sent == list(range(40)) and all(r["query"] for r in script.requests)


@pytest.mark.anyio
async def test_reward_model_robustness() -> None:
    with reward_server(Script(fail_first=1)) as (url, script):
        assert (await judged(rm(url), "abc")).reward == 3.0
        assert len(script.requests) == 2
    with reward_server(Script(hang_s=20)) as (url, _):
        start = time.monotonic()
        with pytest.raises(RewardModelError, match="did not answer after 3 attempts"):
            await judged(rm(url, timeout_s=0.5), "abc")
        assert time.monotonic() - start < 15
    with pytest.raises(RewardModelError, match="ConnectError"):
        await judged(rm(url), "abc")  # that server is gone now
    garbage = reward_server(Script(body='{"rewards": "lots"}'))
    with garbage as (url, _), pytest.raises(RewardModelError, match="rewards"):
        await judged(rm(url), "abc")


@pytest.mark.anyio
async def test_a_cancelled_episode_does_not_strand_its_batch() -> None:
    with reward_server(Script(hang_s=0.3)) as (url, _):
        results: list[float] = []

        async def episode(i: int, cancel: bool) -> None:
            env = rm(url, timeout_s=30)
            await env.reset(Task(id=str(i), prompt="", label=None))
            with anyio.move_on_after(0.05 if cancel else 30):
                results.append((await env.step("y" * i)).reward)
            await env.aclose()

        async with anyio.create_task_group() as group:
            for i in range(6):
                group.start_soon(episode, i, i == 0)
    assert sorted(results) == [1.0, 2.0, 3.0, 4.0, 5.0]


@pytest.mark.anyio
async def test_a_run_sends_the_templated_sequence_as_openrlhf_does() -> None:
    prompt = "<|im_start|>user\nP<|im_end|>\n<|im_start|>assistant\n"
    whole = prompt + "xx<|im_end|>"
    seen = Transcript(
        [ord(c) for c in whole], len(prompt), "stop", lambda ids: "".join(map(chr, ids))
    )
    with reward_server(Script()) as (url, script):
        env = rm(url)
        await env.reset(Task(id="t", prompt="P", label=0))
        with stepping(seen):
            step = await env.step("xx")
        await env.aclose()
    [request] = script.requests
    assert (request["query"], request["prompts"]) == ([whole], [prompt])
    assert step.reward == len("xx<|im_end|>")
