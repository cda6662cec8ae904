"""The OpenAI-compatible endpoint: OpenAI requests in, the engine's exact tokens recorded."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import openai
import pytest

from agenthub.agents import ChatTokenizer, FakeEngine, OpenAIEndpoint, RolloutConfig, Trajectory
from tests.unit.agents._programs import ADD

pytestmark = pytest.mark.anyio

CALL = '<tool_call>{"name": "add", "arguments": {"a": 2, "b": 3}}</tool_call>'


def react_engine(chat: ChatTokenizer, *, call: str = CALL) -> FakeEngine:
    """Calls `add` until a tool has answered, then answers in words."""

    def reply(prompt: Sequence[int]) -> list[int]:
        last = chat.decode_all(prompt).rsplit("<|im_start|>", 2)[-2]
        text = "The sum is 5." if last.startswith("tool") else call
        return [*chat.encode_text(text), chat.closing_ids[0]]

    return FakeEngine(reply, stop_token_ids=chat.stop_token_ids, decode=chat.decode)


@asynccontextmanager
async def endpoint_client(endpoint: OpenAIEndpoint, key: str) -> AsyncIterator[Any]:
    try:
        yield endpoint.openai_client(key)
    finally:
        await endpoint.aclose()


def token_differences(t: Trajectory, engine: FakeEngine) -> int:
    """How many model tokens of `t` differ from what the engine sampled for the prompt before
    them (a model span whose prompt the engine never saw counts all its tokens)."""
    served = {prompt: g for prompt, g in zip(engine.requests, engine.generations, strict=True)}
    differences = 0
    for segment in t.segment_trajectories():
        i, n = 0, len(segment.tokens)
        while i < n:
            if not segment.loss_mask[i]:
                i += 1
                continue
            j = i
            while j < n and segment.loss_mask[j]:
                j += 1
            g = served.get(tuple(segment.tokens[:i]))
            sampled = g is not None and g.token_ids == tuple(segment.tokens[i:j])
            if not (sampled and g is not None and list(g.logprobs) == segment.logprobs[i:j]):
                differences += j - i
            i = j
    return differences


async def test_tool_calls_round_trip_and_the_prompt_extends_the_sampled_tokens(
    tool_chat: ChatTokenizer,
) -> None:
    engine = react_engine(tool_chat)
    endpoint = OpenAIEndpoint(engine, tool_chat, RolloutConfig())
    episode = endpoint.open_episode("e1")
    async with endpoint_client(endpoint, "e1") as client:
        messages: list[Any] = [{"role": "user", "content": "What is 2 + 3?"}]
        first = await client.chat.completions.create(model="m", messages=messages, tools=[ADD])
        [call] = first.choices[0].message.tool_calls or []
        assert first.choices[0].finish_reason == "tool_calls"
        assert (call.function.name, json.loads(call.function.arguments)) == (
            "add",
            {"a": 2, "b": 3},
        )
        assert first.choices[0].message.content is None
        messages += [
            first.choices[0].message,
            {"role": "tool", "tool_call_id": call.id, "content": "5"},
        ]
        second = await client.chat.completions.create(
            model="m",
            messages=messages,
            tools=[ADD],
            logprobs=True,
            extra_body={"return_token_ids": True},
        )
    assert second.choices[0].message.content == "The sum is 5."
    assert second.choices[0].message.tool_calls is None
    assert [c.logprob for c in second.choices[0].logprobs.content] == list(
        engine.generations[1].logprobs
    )
    # One segment: the second prompt is the first prompt, the reply exactly as sampled, and
    # only the tool message rendered after it.
    assert len(episode.segments) == 1
    one, two = episode.calls
    closing = tool_chat.missing_closing(one.token_ids)
    tool_turn = tool_chat.encode_followup([agenthub_tool("5", call.id)], [ADD])
    assert two.prompt_ids == one.prompt_ids + one.token_ids + tuple(closing + tool_turn)
    assert engine.requests == [one.prompt_ids, two.prompt_ids]
    assert second.model_extra["prompt_token_ids"] == list(two.prompt_ids)
    assert second.choices[0].model_extra["token_ids"] == list(two.token_ids)
    assert (one.policy_version, one.segment, two.segment) == (0, 0, 0)


def agenthub_tool(content: str, call_id: str) -> Any:
    from agenthub import Message

    return Message(role="tool", content=content, tool_call_id=call_id)


async def test_a_tool_call_that_does_not_parse_is_plain_content(tool_chat: ChatTokenizer) -> None:
    broken = '<tool_call>{"name": "add", "arguments": {"a": 2,</tool_call>'
    endpoint = OpenAIEndpoint(react_engine(tool_chat, call=broken), tool_chat, RolloutConfig())
    endpoint.open_episode("e")
    async with endpoint_client(endpoint, "e") as client:
        reply = await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "2 + 3?"}], tools=[ADD]
        )
    assert reply.choices[0].message.tool_calls is None
    assert reply.choices[0].message.content == broken
    assert reply.choices[0].finish_reason == "stop"


async def test_a_rewritten_history_opens_a_new_segment(chat: ChatTokenizer) -> None:
    engine = FakeEngine(
        lambda p: [*chat.encode_text("ok"), chat.closing_ids[0]], stop_token_ids=chat.stop_token_ids
    )
    endpoint = OpenAIEndpoint(engine, chat, RolloutConfig())
    episode = endpoint.open_episode("e")
    async with endpoint_client(endpoint, "e") as client:
        messages: list[Any] = [{"role": "user", "content": "Count."}]
        reply = await client.chat.completions.create(model="m", messages=messages)
        # The reply sent back edited: not what was sampled, so a new segment.
        edited = {"role": "assistant", "content": "ok!"}
        await client.chat.completions.create(
            model="m", messages=[*messages, edited, {"role": "user", "content": "More."}]
        )
        assert reply.choices[0].message.content == "ok"
    first, second = episode.calls
    assert (first.segment, second.segment) == (0, 1)
    assert second.prompt_ids == tuple(
        chat.encode_prompt(
            [
                agenthub_msg("user", "Count."),
                agenthub_msg("assistant", "ok!"),
                agenthub_msg("user", "More."),
            ]
        )
    )


def agenthub_msg(role: str, content: str) -> Any:
    from agenthub import Message

    return Message(role=role, content=content)  # type: ignore[arg-type]


async def test_text_completions_extend_by_the_returned_text(chat: ChatTokenizer) -> None:
    two = chat.encode_text(" two")
    engine = FakeEngine(lambda p: two, stop_token_ids=chat.stop_token_ids)
    endpoint = OpenAIEndpoint(engine, chat, RolloutConfig())
    episode = endpoint.open_episode("e")
    async with endpoint_client(endpoint, "e") as client:
        first = await client.completions.create(
            model="m", prompt="one", max_tokens=len(two), logprobs=0
        )
        assert first.choices[0].text == " two"
        assert first.choices[0].finish_reason == "length"
        await client.completions.create(model="m", prompt="one two three", max_tokens=2)
        models = await client.models.list()
    assert [m.id for m in models.data] == ["agenthub"]
    one, two = episode.calls
    assert two.prompt_ids == one.prompt_ids + one.token_ids + tuple(chat.encode_text(" three"))
    assert first.choices[0].logprobs is not None
    assert first.choices[0].logprobs.token_logprobs == list(one.logprobs)


async def test_bad_requests_are_refused_with_the_reason(chat: ChatTokenizer) -> None:
    engine = FakeEngine(lambda p: chat.encode_text("ok"), stop_token_ids=chat.stop_token_ids)
    endpoint = OpenAIEndpoint(engine, chat, RolloutConfig(max_turns=1))
    endpoint.open_episode("e")
    async with endpoint_client(endpoint, "e") as client:
        hi = [{"role": "user", "content": "hi"}]
        with pytest.raises(openai.NotFoundError, match="no episode 'gone'"):
            gone = endpoint.openai_client("gone")
            await gone.chat.completions.create(model="m", messages=hi)
        with pytest.raises(openai.BadRequestError, match="n must be 1"):
            await client.chat.completions.create(model="m", messages=hi, n=2)
        with pytest.raises(openai.BadRequestError, match="role 'function'"):
            await client.chat.completions.create(
                model="m", messages=[{"role": "function", "content": "x"}]
            )
        await client.chat.completions.create(model="m", messages=hi)
        with pytest.raises(openai.BadRequestError, match="made its 1 calls"):
            await client.chat.completions.create(model="m", messages=hi)
    assert len(engine.requests) == 1


async def test_serve_puts_the_endpoint_on_a_port(chat: ChatTokenizer) -> None:
    engine = FakeEngine(lambda p: chat.encode_text("ok"), stop_token_ids=chat.stop_token_ids)
    endpoint = OpenAIEndpoint(engine, chat, RolloutConfig())
    episode = endpoint.open_episode("e")
    async with endpoint.serve() as origin:
        client = openai.AsyncOpenAI(
            base_url=endpoint.base_url("e", origin), api_key="-", max_retries=0
        )
        reply = await client.completions.create(model="m", prompt="one", max_tokens=1)
        await client.close()
    assert reply.choices[0].text == "ok"[: len(chat.decode(engine.generations[0].token_ids))]
    assert len(episode.calls) == 1
