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
