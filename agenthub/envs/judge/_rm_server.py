"""A reward server speaking OpenRLHF's `/get_reward`, for a reward function or a local
sequence-classification model (`agenthub serve-rm`).

Concurrent requests are joined into batches: one scoring loop takes every sample queued (up
to `max_batch_size`) and scores them together in a worker thread, so the event loop keeps
answering (health checks included) while a batch is scored.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from agenthub._errors import AgentHubError
from agenthub.envs.reward_func import RewardOutput

Scorer = Callable[[list[str], list[str], list[Any]], RewardOutput]
"""Scores a batch: (queries, prompts, labels) -> one reward per query. Called in a thread."""


class BadRequest(ValueError):
    """A request body that does not follow the protocol."""


_SHAPE = '{"query": [...], "prompts"?: [...], "labels"?: [...]}'
# What a JSON body that is no object parses to, in JSON's words.
_JSON_KINDS: dict[type, str] = {
    list: "an array",
    str: "a string",
    int: "a number",
    float: "a number",
    bool: "true or false",
    type(None): "null",
}


def parse_request(
    raw: bytes, *, needs_labels: bool = False
) -> tuple[list[str], list[str], list[Any]]:
    """The (queries, prompts, labels) of a `/get_reward` body; raises `BadRequest`. Labels may
    be left out unless `needs_labels`: a scorer that reads them must not get None for each."""
    try:
        body = json.loads(raw)
    except ValueError as exc:
        raise BadRequest(f"the body is not JSON ({exc})") from None
    if not isinstance(body, dict):
        raise BadRequest(f"the body must be a JSON object {_SHAPE}, not {_JSON_KINDS[type(body)]}")
    if "query" not in body:
        sent = ", ".join(repr(k) for k in body) or "none"
        raise BadRequest(f"missing field 'query' (fields sent: {sent}); send {_SHAPE}")
    queries = body["query"]
    if not isinstance(queries, list) or not all(isinstance(q, str) for q in queries):
        raise BadRequest("'query' must be a list of strings")
    if not queries:
        raise BadRequest("'query' is empty: send at least one sample")
    n = len(queries)
    columns: dict[str, list[Any]] = {}
    for name in ("prompts", "labels"):
        value = body.get(name)
        if value is None and name == "labels" and needs_labels:
            raise BadRequest(
                f"missing field 'labels': this reward function takes labels; send one per "
                f"query ({n})"
            )
        if value is None:
            value = [""] * n if name == "prompts" else [None] * n
        if not isinstance(value, list) or len(value) != n:
            got = f"{len(value)} items" if isinstance(value, list) else type(value).__name__
            raise BadRequest(f"'{name}' must be a list with one item per query ({n}), got {got}")
        columns[name] = value
    if not all(isinstance(p, str) for p in columns["prompts"]):
        raise BadRequest("'prompts' must be a list of strings")
    return queries, columns["prompts"], columns["labels"]


@dataclass
class _Request:
    samples: tuple[list[str], list[str], list[Any]]
    done: anyio.Event = field(default_factory=anyio.Event)
    output: RewardOutput | None = None
    error: str | None = None


@dataclass
class BatchStats:
    requests: int = 0
    batches: int = 0
    samples: int = 0


class _Batcher:
    def __init__(self, scorer: Scorer, max_batch_size: int) -> None:
        self.scorer = scorer
        self.max_batch_size = max_batch_size
        self.stats = BatchStats()
        self._send, self._receive = anyio.create_memory_object_stream[_Request](1 << 16)

    async def score(self, samples: tuple[list[str], list[str], list[Any]]) -> _Request:
        request = _Request(samples)
        self.stats.requests += 1
        await self._send.send(request)
        await request.done.wait()
        return request

    async def run(self) -> None:
        async with self._receive:
            async for first in self._receive:
                batch, size = [first], len(first.samples[0])
                while size < self.max_batch_size:
                    try:
                        more = self._receive.receive_nowait()
                    except anyio.WouldBlock:
                        break
                    batch.append(more)
                    size += len(more.samples[0])
                await self._score(batch)

    async def _score(self, batch: list[_Request]) -> None:
        self.stats.batches += 1
        self.stats.samples += sum(len(r.samples[0]) for r in batch)
        columns = tuple([x for r in batch for x in r.samples[i]] for i in range(3))
        try:
            output = await anyio.to_thread.run_sync(functools.partial(self.scorer, *columns))
        except AgentHubError as exc:
            if len(batch) > 1:  # one bad request must not fail the requests batched with it
                for request in batch:
                    await self._score([request])
                return
            batch[0].error = str(exc)
        else:
            start = 0
            for request in batch:
                n = len(request.samples[0])
                request.output = _slice(output, start, start + n)
                start += n
        for request in batch:
            request.done.set()


def _slice(output: RewardOutput, lo: int, hi: int) -> RewardOutput:
    return RewardOutput(
        rewards=output.rewards[lo:hi],
        scores=None if output.scores is None else output.scores[lo:hi],
        extra_logs={k: v[lo:hi] for k, v in output.extra_logs.items()},
    )


def build_app(
    scorer: Scorer, *, name: str, max_batch_size: int = 64, needs_labels: bool = False
) -> Starlette:
    """The Starlette app: `POST /get_reward` and `GET /health`. With `needs_labels`, a request
    without labels is refused (422) instead of scoring None labels."""
    batcher = _Batcher(scorer, max_batch_size)

    async def get_reward(request: Request) -> JSONResponse:
        try:
            samples = parse_request(await request.body(), needs_labels=needs_labels)
        except BadRequest as exc:
            status = 400 if "not JSON" in str(exc) else 422
            return JSONResponse({"detail": str(exc)}, status_code=status)
        done = await batcher.score(samples)
        if done.output is None:
            return JSONResponse({"detail": f"scoring failed: {done.error}"}, status_code=500)
        body: dict[str, Any] = {"rewards": done.output.rewards}
        if done.output.scores is not None:
            body["scores"] = done.output.scores
        if done.output.extra_logs:
            body["extra_logs"] = done.output.extra_logs
        return JSONResponse(body)

    async def health(request: Request) -> JSONResponse:
        stats = batcher.stats
        return JSONResponse(
            {
                "status": "ok",
                "scorer": name,
                "requests": stats.requests,
                "batches": stats.batches,
                "samples": stats.samples,
            }
        )

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with anyio.create_task_group() as group:
            group.start_soon(batcher.run)
            yield
            group.cancel_scope.cancel()

    return Starlette(
        routes=[
            Route("/get_reward", get_reward, methods=["POST"]),
            Route("/health", health, methods=["GET"]),
        ],
        lifespan=lifespan,
    )


class SequenceClassifierScorer:
    """Rewards from a local transformers sequence-classification model: the first logit of
    each query (the OpenRLHF reward-model convention). Needs the `train` extra."""

    def __init__(self, path: str, *, device: str = "cpu", max_length: int = 2048) -> None:
        try:
            import torch
            from transformers import AutoModelForSequenceClassification, AutoTokenizer
        except ImportError as exc:
            raise AgentHubError(
                f"serving a model needs torch and transformers ({exc}); install agenthub[train]"
            ) from exc
        self._torch = torch
        try:
            kind = torch.device(device).type
        except RuntimeError:
            raise AgentHubError(
                f"device {device!r} is not a torch one; use cpu, cuda or cuda:N"
            ) from None
        if kind == "cuda" and not torch.cuda.is_available():
            raise AgentHubError(f"device {device!r}: torch sees no CUDA GPU here; use cpu")
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(path)
            model = AutoModelForSequenceClassification.from_pretrained(path)
        except (OSError, ValueError) as exc:  # transformers' word for a directory it cannot use
            reason = " ".join(str(exc).split())  # one line, as the CLI prints it
            raise AgentHubError(
                f"{path} holds no loadable sequence-classification model and tokenizer: {reason}"
            ) from exc
        self.model = model.to(device).eval()
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.device = device
        self.max_length = max_length

    def __call__(self, queries: list[str], prompts: list[str], labels: list[Any]) -> RewardOutput:
        inputs = self.tokenizer(
            queries,
            padding=True,
            truncation=True,
            max_length=self.max_length,
            return_tensors="pt",
        ).to(self.device)
        with self._torch.inference_mode():
            logits = self.model(**inputs).logits
        rewards = [float(x) for x in logits[:, 0].float().cpu().tolist()]
        if not all(math.isfinite(r) for r in rewards):
            raise AgentHubError(f"the model produced non-finite rewards: {rewards}")
        return RewardOutput(rewards=rewards)
