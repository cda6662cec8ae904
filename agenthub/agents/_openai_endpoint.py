"""`OpenAIEndpoint`: an OpenAI-compatible server in front of one engine, token-faithful per
episode."""

from __future__ import annotations

import importlib
import math
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any

import anyio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from agenthub.agents._chat import ChatTokenizer
from agenthub.agents._config import RolloutConfig
from agenthub.agents._endpoint_episode import EndpointEpisode
from agenthub.agents._endpoint_messages import RequestError, read_messages, read_tools, reply_turn
from agenthub.agents._engine import Generation, InferenceEngine, SamplingParams
from agenthub.agents._errors import EngineError
from agenthub.agents._session import Session
from agenthub.agents._trajectory import EpisodeError

__all__ = ["OpenAIEndpoint"]

_ORIGIN = "http://agenthub.local"
Body = dict[str, Any]


class _CallFailed(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class OpenAIEndpoint:
    """`/v1/chat/completions`, `/v1/completions` and `/v1/models` for the episodes of one run,
    served from one `InferenceEngine`.

    Each episode has its own base URL, `{origin}/episodes/{key}/v1` (`base_url`), which
    agenthub hands the program with an `openai` client; calls under it build that episode's
    `EndpointEpisode`: the exact prompt ids, sampled ids, logprobs and policy version of every
    call, in segments of exact tokens. Prompts are never re-rendered from a history the model
    already answered: see `EndpointEpisode` for when a call extends a segment.

    What a request may set: `max_tokens` (or `max_completion_tokens`) lowers the run's reply
    limit, `stop` adds stop strings, `tools` are shown to the model through the chat template
    and the reply's `<tool_call>` blocks come back as OpenAI `tool_calls` (a block that does
    not parse leaves the reply as plain content, as vLLM's server does), `logprobs` and
    vLLM's `return_token_ids` bring back the sampled tokens. Temperature, top-p and seed are
    the run's (`RolloutConfig.sampling`), so the trainer learns from the distribution it
    configured; `model` may name anything. `n` must be 1.

    In-process programs reach it through `openai_client(key)` (an ASGI transport: no socket,
    no port); `serve()` puts it on a TCP port for programs in other processes.
    """

    def __init__(
        self,
        engine: InferenceEngine,
        chat: ChatTokenizer,
        config: RolloutConfig,
        *,
        model: str = "agenthub",
    ) -> None:
        self.engine = engine
        self.chat = chat
        self.config = config
        self.model = model
        stops = {*config.sampling.stop_token_ids, *chat.stop_token_ids}
        self._sampling = config.sampling.replace(stop_token_ids=tuple(sorted(stops)))
        self._episodes: dict[str, EndpointEpisode] = {}
        self._http: Any = None
        prefix = "/episodes/{key}/v1"
        self.app = Starlette(
            routes=[
                Route(f"{prefix}/models", self._models, methods=["GET"]),
                Route(f"{prefix}/chat/completions", self._chat_completions, methods=["POST"]),
                Route(f"{prefix}/completions", self._completions, methods=["POST"]),
            ]
        )

    def open_episode(self, key: str | None = None, *, seed: int | None = None) -> EndpointEpisode:
        """Start recording an episode under `key` (a fresh one when not given). With `seed`,
        the episode's n-th call samples with seed `seed + n`."""
        key = key or uuid.uuid4().hex
        if key in self._episodes:
            raise ValueError(f"episode {key!r} is already open on this endpoint")
        episode = EndpointEpisode(key, self.chat)
        episode.seed = seed
        self._episodes[key] = episode
        return episode

    def close_episode(self, key: str) -> EndpointEpisode:
        """Stop serving the episode (later calls get 404) and return what it recorded."""
        return self._episodes.pop(key)

    def base_url(self, key: str, origin: str = _ORIGIN) -> str:
        """The episode's OpenAI base URL, for `openai.AsyncOpenAI(base_url=...)`."""
        return f"{origin}/episodes/{key}/v1"

    def openai_client(self, key: str) -> Any:
        """An `openai.AsyncOpenAI` for episode `key` that reaches this endpoint in-process,
        without retries (a retried call would sample again). All episodes' clients share one
        HTTP client (building one costs tens of milliseconds), so leave them open: the
        endpoint's `aclose` closes it."""
        import openai

        if self._http is None:
            # openai's own client class, on the HTTP library it is built on (httpx, or httpx2
            # in newer releases), over an ASGI transport: no socket, no port.
            client = openai.DefaultAsyncHttpxClient
            base = next(c for c in client.__mro__ if c.__name__ == "AsyncClient")
            http = importlib.import_module(base.__module__.split(".")[0])
            self._http = client(transport=http.ASGITransport(app=self.app), timeout=None)
        return openai.AsyncOpenAI(
            base_url=self.base_url(key), api_key="agenthub", max_retries=0, http_client=self._http
        )

    async def aclose(self) -> None:
        """Close the HTTP client the in-process `openai` clients share. Idempotent."""
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    @asynccontextmanager
    async def serve(self, host: str = "127.0.0.1", port: int = 0) -> AsyncIterator[str]:
        """Serve on a TCP port (any free one for 0) while in the block; yields the origin to
        give `base_url` (`http://host:port`)."""
        import uvicorn

        server = uvicorn.Server(uvicorn.Config(self.app, host=host, port=port, log_level="warning"))
        async with anyio.create_task_group() as tg:
            tg.start_soon(server.serve)
            while not server.started:
                if server.should_exit:
                    raise RuntimeError(f"the endpoint could not listen on {host}:{port}")
                await anyio.sleep(0.01)
            bound = server.servers[0].sockets[0].getsockname()[1]
            try:
                yield f"http://{host}:{bound}"
            finally:
                server.should_exit = True

    async def _models(self, request: Request) -> JSONResponse:
        if request.path_params["key"] not in self._episodes:
            return _unknown(request.path_params["key"])
        card = {
            "id": self.model,
            "object": "model",
            "created": 0,
            "owned_by": "agenthub",
            "max_model_len": self.engine.max_model_len,
        }
        return JSONResponse({"object": "list", "data": [card]})

    async def _chat_completions(self, request: Request) -> JSONResponse:
        return await self._serve(request, self._chat)

    async def _completions(self, request: Request) -> JSONResponse:
        return await self._serve(request, self._text)

    async def _serve(
        self, request: Request, handler: Callable[[EndpointEpisode, Body], Awaitable[Body]]
    ) -> JSONResponse:
        episode = self._episodes.get(request.path_params["key"])
        if episode is None:
            return _unknown(request.path_params["key"])
        try:
            body = await request.json()
        except ValueError:
            return _error(400, "the request body is not JSON")
        try:
            if not isinstance(body, dict):
                raise RequestError("the request body must be a JSON object")
            if body.get("n", 1) != 1:
                raise RequestError("n must be 1 here: ask again for another sample")
            if body.get("stream"):
                raise RequestError("streaming is not supported here: leave `stream` off")
            async with episode.lock:
                return JSONResponse(await handler(episode, body))
        except RequestError as exc:
            return _error(400, str(exc))
        except _CallFailed as exc:
            return _error(exc.status, str(exc), "server_error")

    async def _chat(self, episode: EndpointEpisode, body: Body) -> Body:
        turns, tools = read_messages(body), read_tools(body)
        session = episode.prompt_chat(turns, tools, self.engine.policy_version)
        generation, prompt = await self._generate(episode, session, body)
        turn = reply_turn(episode.add_generation(generation, prompt), parse_calls=bool(tools))
        episode.add_reply(turn)
        choice: Body = {
            "index": 0,
            "message": turn.openai(),
            "finish_reason": "tool_calls" if turn.tool_calls else generation.finish_reason,
            "logprobs": None,
        }
        if body.get("logprobs"):
            choice["logprobs"] = {"content": self._token_logprobs(generation)}
        return self._response(body, "chat.completion", choice, prompt, generation)

    async def _text(self, episode: EndpointEpisode, body: Body) -> Body:
        session = episode.prompt_text(_text_prompt(body.get("prompt")), self.engine.policy_version)
        generation, prompt = await self._generate(episode, session, body)
        text = episode.add_generation(generation, prompt)
        episode.add_reply(text)
        choice: Body = {
            "index": 0,
            "text": text,
            "finish_reason": generation.finish_reason,
            "logprobs": None,
        }
        if body.get("logprobs") is not None:
            content = self._token_logprobs(generation)
            choice["logprobs"] = {
                "tokens": [c["token"] for c in content],
                "token_logprobs": list(generation.logprobs),
                "top_logprobs": None,
                "text_offset": None,
            }
        return self._response(body, "text_completion", choice, prompt, generation)

    async def _generate(
        self, episode: EndpointEpisode, session: Session, body: Body
    ) -> tuple[Generation, tuple[int, ...]]:
        try:
            sampling = self._sampling_for(episode, session, body)
        except RequestError:
            episode.undo_prompt()
            raise
        prompt = tuple(session.tokens)
        limit_s = self.config.timeouts.generate_s
        started = time.perf_counter()
        failure: EpisodeError | None = None
        with anyio.move_on_after(math.inf if limit_s is None else limit_s) as scope:
            try:
                generation = await self.engine.generate(prompt, sampling)
            except EngineError as exc:
                failure = EpisodeError(cause="generation_error", message=str(exc))
        episode.generate_s += time.perf_counter() - started
        if scope.cancelled_caught:
            failure = EpisodeError(
                cause="generation_timeout", message=f"generate took longer than {limit_s} s"
            )
        elif failure is None and generation.finish_reason == "abort":
            failure = EpisodeError(cause="generation_error", message="the engine aborted")
        if failure is not None:
            episode.fail(failure)
            episode.undo_prompt()
            raise _CallFailed(504 if "timeout" in failure.cause else 500, failure.message)
        return generation, prompt

    def _sampling_for(
        self, episode: EndpointEpisode, session: Session, body: Body
    ) -> SamplingParams:
        config = self.config
        if config.max_turns is not None and len(episode.calls) >= config.max_turns:
            episode.truncated = True
            raise RequestError(
                f"this episode has made its {config.max_turns} calls (the run's max_turns); "
                "finish with what you have"
            )
        limit = self.engine.max_model_len
        if config.max_tokens is not None:
            limit = min(limit, config.max_tokens)
        room = limit - len(session)
        if room < 1:
            episode.truncated = True
            raise RequestError(
                f"the conversation is {len(session)} tokens, which leaves no room to reply "
                f"within the run's limit of {limit}; shorten the history or finish"
            )
        sampling = self._sampling.with_stop(_stops(body.get("stop")))
        wanted = body.get("max_completion_tokens") or body.get("max_tokens")
        if wanted is not None and (isinstance(wanted, bool) or not isinstance(wanted, int)):
            raise RequestError(f"max_tokens must be a whole number, got {wanted!r}")
        limits = [sampling.max_tokens, room, *([wanted] if wanted else [])]
        sampling = sampling.replace(max_tokens=max(1, min(limits)))
        if episode.seed is not None:
            sampling = sampling.replace(seed=(episode.seed + len(episode.calls)) & 0x7FFFFFFF)
        return sampling

    def _token_logprobs(self, generation: Generation) -> list[Body]:
        return [
            {"token": self.chat.decode_all([t]), "logprob": lp, "bytes": None, "top_logprobs": []}
            for t, lp in zip(generation.token_ids, generation.logprobs, strict=True)
        ]

    def _response(
        self, body: Body, kind: str, choice: Body, prompt: tuple[int, ...], gen: Generation
    ) -> Body:
        response: Body = {
            "id": f"{'chatcmpl' if kind == 'chat.completion' else 'cmpl'}-{uuid.uuid4().hex}",
            "object": kind,
            "created": int(time.time()),
            "model": str(body.get("model") or self.model),
            "choices": [choice],
            "usage": {
                "prompt_tokens": len(prompt),
                "completion_tokens": len(gen.token_ids),
                "total_tokens": len(prompt) + len(gen.token_ids),
            },
        }
        if body.get("return_token_ids"):
            choice["token_ids"] = list(gen.token_ids)
            response["prompt_token_ids"] = list(prompt)
        return response


def _text_prompt(prompt: Any) -> str | list[int]:
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]
    if isinstance(prompt, str) and prompt:
        return prompt
    if isinstance(prompt, list) and prompt and all(_token(t) for t in prompt):
        return list(prompt)
    raise RequestError("`prompt` must be one non-empty text or one non-empty list of token ids")


def _token(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _stops(stop: Any) -> tuple[str, ...]:
    if stop is None:
        return ()
    stops = [stop] if isinstance(stop, str) else stop
    if not (isinstance(stops, list) and all(isinstance(s, str) and s for s in stops)):
        raise RequestError(f"`stop` must be a string or a list of non-empty strings: {stop!r}")
    return tuple(stops)


def _unknown(key: str) -> JSONResponse:
    return _error(
        404,
        f"no episode {key!r} is open on this endpoint (it ended, or the base URL is not the "
        "one agenthub gave the program)",
    )


def _error(status: int, message: str, kind: str = "invalid_request_error") -> JSONResponse:
    body: Mapping[str, Any] = {"error": {"message": message, "type": kind, "code": status}}
    return JSONResponse(dict(body), status_code=status)
