"""The OpenAI-compatible engine's request and parsing, against httpx.MockTransport servers."""

from __future__ import annotations

import json
from typing import Any

import anyio
import httpx
import pytest

from agenthub.agents import EngineError, OpenAIEngine, SamplingParams


def serving(completion: dict[str, Any], seen: list[dict[str, Any]]) -> httpx.MockTransport:
    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/models"):
            return httpx.Response(200, json={"data": [{"id": "m", "max_model_len": 64}]})
        seen.append(json.loads(request.content))
        return httpx.Response(200, json={"choices": [completion]})

    return httpx.MockTransport(handle)


def generate(transport: httpx.MockTransport, sampling: SamplingParams) -> Any:
    async def go() -> Any:
        engine = await OpenAIEngine.connect("http://server/v1", transport=transport)
        try:
            return await engine.generate([1, 2, 3], sampling)
        finally:
            await engine.aclose()

    return anyio.run(go)


def test_token_ids_go_in_and_come_back_with_logprobs() -> None:
    seen: list[dict[str, Any]] = []
    completion = {
        "finish_reason": "stop",
        "logprobs": {"tokens": ["token_id:7", "token_id:2"], "token_logprobs": [-0.5, -0.25]},
    }
    g = generate(serving(completion, seen), SamplingParams(max_tokens=4, stop_token_ids=(2,)))
    assert g.token_ids == (7, 2) and g.logprobs == (-0.5, -0.25) and g.finish_reason == "stop"
    [body] = seen
    assert body["prompt"] == [1, 2, 3] and body["model"] == "m"
    assert body["return_tokens_as_token_ids"] is True and body["logprobs"] == 0
    assert body["stop_token_ids"] == [2] and body["max_tokens"] == 4


def test_a_server_that_returns_text_tokens_is_refused() -> None:
    completion = {"finish_reason": "length", "logprobs": {"tokens": ["he"], "token_logprobs": [0]}}
    with pytest.raises(EngineError, match="return_tokens_as_token_ids"):
        generate(serving(completion, []), SamplingParams())


def test_server_errors_are_engine_errors() -> None:
    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/models"):
            return httpx.Response(200, json={"data": [{"id": "m", "max_model_len": 64}]})
        return httpx.Response(500, text="overloaded")

    with pytest.raises(EngineError, match="answered 500: overloaded"):
        generate(httpx.MockTransport(handle), SamplingParams())


def replying(status: int, content: bytes) -> httpx.MockTransport:
    """A server whose every completion is `content`, sent with `status`."""

    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/models"):
            return httpx.Response(200, json={"data": [{"id": "m", "max_model_len": 64}]})
        return httpx.Response(status, content=content)

    return httpx.MockTransport(handle)


def completion(ids: list[Any], logprobs: list[Any]) -> bytes:
    tokens = [f"token_id:{i}" for i in ids]
    choice = {"finish_reason": "stop", "token_ids": ids, "logprobs": {"tokens": tokens}}
    choice["logprobs"]["token_logprobs"] = logprobs
    return json.dumps({"choices": [choice]}).encode()


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (b"<html>proxy error</html>", 'answered 200 but not with a JSON object: "<html>proxy'),
        (b'["a list"]', 'answered 200 but not with a JSON object: "[\\"a list\\"]"'),
        (b'{"choices": []}', 'answered without a completion in choices: {"choices": []}'),
        (b'{"error": "busy"}', 'answered without a completion in choices: {"error": "busy"}'),
        (completion([7, 2], ["abc", -0.5]), 'returned logprob "abc", not a number, in'),
        (completion([7, 2], [None, -0.5]), "returned logprob null, not a number"),
        (completion([7, -5], [-0.5, -0.5]), "returned token id -5, not an id in 0 or more"),
        (completion([7, "x"], [-0.5, -0.5]), 'returned token id "x", not an id'),
    ],
    ids=["html", "not-an-object", "no-choices", "error-object", "text-logprob", "null-logprob",
         "negative-id", "text-id"],
)  # fmt: skip
def test_a_malformed_reply_is_an_engine_error_naming_the_url_and_what_was_sent(
    content: bytes, said: str
) -> None:
    with pytest.raises(EngineError) as caught:
        generate(replying(200, content), SamplingParams())
    assert str(caught.value).startswith(f"http://server/v1/completions {said}")


def test_token_ids_outside_the_vocabulary_are_refused_when_its_size_is_known() -> None:
    async def go(vocab_size: int | None) -> Any:
        transport = replying(200, completion([7, 10**9], [-0.5, -0.5]))
        engine = await OpenAIEngine.connect(
            "http://server/v1", transport=transport, vocab_size=vocab_size
        )
        try:
            return await engine.generate([1], SamplingParams())
        finally:
            await engine.aclose()

    with pytest.raises(EngineError, match=r"token id 1000000000, not an id in 0\.\.99; does it"):
        anyio.run(go, 100)
    assert anyio.run(go, None).token_ids == (7, 10**9)


def test_token_ids_given_as_text_tokens_are_checked_too() -> None:
    logprobs = {"tokens": ["token_id:x"], "token_logprobs": [0]}
    choice = {"finish_reason": "stop", "logprobs": logprobs}
    with pytest.raises(EngineError, match='returned token id "x", not an id'):
        generate(replying(200, json.dumps({"choices": [choice]}).encode()), SamplingParams())
