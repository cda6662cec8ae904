"""An engine for any OpenAI-compatible completions server that speaks token ids (vLLM's does)."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

import httpx

from agenthub._tracebacks import described
from agenthub.agents._engine import FinishReason, Generation, InferenceEngine, SamplingParams
from agenthub.agents._errors import EngineError

__all__ = ["OpenAIEngine"]

_TOKEN_PREFIX = "token_id:"


class OpenAIEngine(InferenceEngine):
    """Generates through `POST {base_url}/completions` with token ids in and token ids out.

    The prompt is sent as a list of token ids; `logprobs: 0` with
    `return_tokens_as_token_ids: true` (a vLLM extension) brings back every sampled token as
    `token_id:N` with its logprob (newer vLLM also lists them under `token_ids` when asked with
    `return_token_ids`), so nothing is re-tokenized on either side. `base_url` ends
    in `/v1`. Build it with `await OpenAIEngine.connect(...)`, which asks `/models` for the
    served model and its context length when they are not given. With `vocab_size` (the
    tokenizer's), a token id outside `0..vocab_size-1` is refused as the server's error.

    Anything malformed in a reply (not JSON, no choices, a logprob that is not a number, a
    token id that is not one) is an `EngineError` naming the URL and what was sent, so it
    fails only the episode that asked.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        max_model_len: int,
        *,
        api_key: str | None = None,
        timeout_s: float = 600.0,
        max_connections: int = 256,
        vocab_size: int | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        self._max_model_len = max_model_len
        self._vocab_size = vocab_size
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.AsyncClient(
            base_url=self.base_url,
            headers=headers,
            timeout=httpx.Timeout(timeout_s, connect=10.0),
            limits=httpx.Limits(max_connections=max_connections),
            transport=transport,
        )

    @classmethod
    async def connect(
        cls,
        base_url: str,
        model: str | None = None,
        max_model_len: int | None = None,
        **kwargs: Any,
    ) -> OpenAIEngine:
        """Build an engine, asking the server for what was not given."""
        engine = cls(base_url, model or "", max_model_len or 0, **kwargs)
        if model is None or max_model_len is None:
            try:
                card = await engine._served_model(model)
            except BaseException:
                await engine.aclose()
                raise
            engine.model = model or str(card["id"])
            engine._max_model_len = max_model_len or int(card.get("max_model_len") or 0)
        if engine._max_model_len < 1:
            await engine.aclose()
            raise EngineError(
                f"{base_url} does not report max_model_len for {engine.model!r}; "
                "pass max_model_len=... (the server's context length)"
            )
        return engine

    @property
    def max_model_len(self) -> int:
        return self._max_model_len

    async def generate(self, prompt_ids: Sequence[int], sampling: SamplingParams) -> Generation:
        version = self.policy_version
        body: dict[str, Any] = {
            "model": self.model,
            "prompt": list(prompt_ids),
            "max_tokens": sampling.max_tokens,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "logprobs": 0,
            "return_tokens_as_token_ids": True,
            "return_token_ids": True,
            "skip_special_tokens": False,
        }
        if sampling.top_k > 0:
            body["top_k"] = sampling.top_k
        if sampling.seed is not None:
            body["seed"] = sampling.seed
        if sampling.stop_token_ids:
            body["stop_token_ids"] = list(sampling.stop_token_ids)
        if sampling.stop:
            body["stop"] = list(sampling.stop)
            body["include_stop_str_in_output"] = True
        data = await self._post("/completions", body)
        url = f"{self.base_url}/completions"
        choices = data.get("choices")
        if not (isinstance(choices, list) and choices and isinstance(choices[0], dict)):
            raise EngineError(f"{url} answered without a completion in choices: {_excerpt(data)}")
        return _parse_choice(choices[0], version, len(prompt_ids), url, self._vocab_size)

    async def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        try:
            response = await self._client.post(path, json=body)
        except httpx.HTTPError as exc:
            raise EngineError(f"{self.base_url}{path}: {described(exc)}") from exc
        if response.status_code != 200:
            raise EngineError(
                f"{self.base_url}{path} answered {response.status_code}: {response.text[:500]}"
            )
        try:
            data = response.json()
        except ValueError:
            data = None
        if not isinstance(data, dict):
            # A proxy's error page, say, sent with 200.
            raise EngineError(
                f"{self.base_url}{path} answered 200 but not with a JSON object: "
                f"{_excerpt(response.text)}"
            )
        return data

    async def _served_model(self, model: str | None) -> dict[str, Any]:
        try:
            response = await self._client.get("/models")
            response.raise_for_status()
            cards: list[dict[str, Any]] = response.json()["data"]
        except (httpx.HTTPError, KeyError, ValueError) as exc:
            raise EngineError(
                f"could not list models at {self.base_url}/models ({described(exc)}); "
                "is an OpenAI-compatible server running there?"
            ) from exc
        for card in cards:
            if model is None or card.get("id") == model:
                return card
        names = [c.get("id") for c in cards]
        raise EngineError(f"{self.base_url} does not serve {model!r} (it serves {names})")

    async def aclose(self) -> None:
        await self._client.aclose()


def _parse_choice(
    choice: dict[str, Any], version: int, prompt_len: int, url: str, vocab_size: int | None
) -> Generation:
    logprobs = choice.get("logprobs") or {}
    tokens = logprobs.get("tokens") if isinstance(logprobs, dict) else None
    values = logprobs.get("token_logprobs") if isinstance(logprobs, dict) else None
    if not (isinstance(tokens, list) and isinstance(values, list)):
        raise EngineError(
            f"{url} returned no per-token logprobs; agenthub needs a server that accepts "
            "token-id prompts and honours logprobs=0 with return_tokens_as_token_ids (vLLM)"
        )
    given = choice.get("token_ids")
    if given is None:
        for token in tokens:
            if not (isinstance(token, str) and token.startswith(_TOKEN_PREFIX)):
                raise EngineError(
                    f"{url} returned token {token!r} as text, not as 'token_id:N'; the server "
                    "must support return_tokens_as_token_ids (vLLM's OpenAI server does)"
                )
        given = [_as_int(t[len(_TOKEN_PREFIX) :]) for t in tokens]
    if not isinstance(given, list):
        raise EngineError(f"{url} returned token_ids that are not a list: {_excerpt(given)}")
    ids = _token_ids(given, url, vocab_size)
    if len(ids) != len(values):
        raise EngineError(f"{url} returned {len(ids)} token ids but {len(values)} logprobs")
    if bad := [v for v in values if isinstance(v, bool) or not isinstance(v, (int, float))]:
        raise EngineError(
            f"{url} returned logprob {_excerpt(bad[0])}, not a number, in {_excerpt(values)}"
        )
    reason = choice.get("finish_reason")
    finish: FinishReason = (
        "stop" if reason == "stop" else "length" if reason == "length" else "abort"
    )
    return Generation(
        tuple(ids),
        tuple(float(v) for v in values),
        finish,
        version,
        prompt_tokens=prompt_len,
    )


def _token_ids(given: list[Any], url: str, vocab_size: int | None) -> list[int]:
    """The ids, each one the tokenizer has: a server serving another model, or a broken one,
    sends ids that decode to nothing or crash the decoder."""
    top = math.inf if vocab_size is None else vocab_size
    for t in given:
        if isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < top:
            within = "0 or more" if vocab_size is None else f"0..{vocab_size - 1}"
            raise EngineError(
                f"{url} returned token id {_excerpt(t)}, not an id in {within}; does it serve "
                f"the model whose tokenizer this run uses? It sent {_excerpt(given)}"
            )
    return given


def _as_int(text: str) -> int | str:
    try:
        return int(text)
    except ValueError:
        return text


def _excerpt(value: Any, limit: int = 200) -> str:
    """What the server sent, short enough for a one-line error."""
    text = json.dumps(value)
    return text if len(text) <= limit else f"{text[:limit]}..."
