"""A reward server speaking OpenRLHF's `/get_reward`, for a reward function or a local
reward model (`agenthub serve-rm`; the model's scorer is in `_rm_model`).

Concurrent requests are joined into batches: one scoring loop takes every sample queued (up
to `max_batch_size`) and scores them together in a worker thread, so the event loop keeps
answering (health checks included) while a batch is scored.
"""

from __future__ import annotations

import functools
import json
import logging
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
from agenthub._tracebacks import described
from agenthub.envs.reward_func import RewardOutput

_logger = logging.getLogger("agenthub.serve_rm")

Scorer = Callable[[list[str], list[str], list[Any]], RewardOutput]
"""Scores a batch: (queries, prompts, labels) -> one reward per query. Called in a thread."""


class BadRequest(ValueError):
    """A request body that does not follow the protocol."""


_SHAPE = '{"query": [...], "prompts"?: [...], "labels"?: [...]}'
# What a JSON value parses to, in JSON's words.
_JSON_KINDS: dict[type, str] = {
    dict: "an object",
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
    be left out unless `needs_labels` and there are queries: a scorer that reads them must not
    get None for each."""
    try:
        body = json.loads(raw)
    except ValueError as exc:
        raise BadRequest(f"the body is not JSON ({exc})") from None
    if not isinstance(body, dict):
        raise BadRequest(f"the body must be a JSON object {_SHAPE}, not {_JSON_KINDS[type(body)]}")
    if "query" not in body:
        sent = ", ".join(repr(k) for k in body) or "none"
        raise BadRequest(f"missing field 'query' (fields sent: {sent}); send {_SHAPE}")
    queries = _strings(body["query"], "query")
    n = len(queries)
    columns: dict[str, list[Any]] = {}
    for name in ("prompts", "labels"):
        value = body.get(name)
        if value is None and name == "labels" and needs_labels and n:
            raise BadRequest(
                f"missing field 'labels': this reward function takes labels; send one per "
                f"query ({n})"
            )
        if value is None:
            value = [""] * n if name == "prompts" else [None] * n
        if not isinstance(value, list) or len(value) != n:
            got = f"{len(value)} items" if isinstance(value, list) else _JSON_KINDS[type(value)]
            raise BadRequest(f"'{name}' must be a list with one item per query ({n}), got {got}")
        columns[name] = value
    return queries, _strings(columns["prompts"], "prompts"), columns["labels"]


def _strings(value: Any, name: str) -> list[str]:
    """`value`, a list of strings; else `BadRequest` saying what was sent instead."""
    if not isinstance(value, list):
        raise BadRequest(f"'{name}' must be a list of strings, not {_JSON_KINDS[type(value)]}")
    for i, item in enumerate(value):
        if not isinstance(item, str):
            raise BadRequest(
                f"'{name}' must be a list of strings; item {i} is {_JSON_KINDS[type(item)]}"
            )
    return value


@dataclass(eq=False)
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
    failed: int = 0


class _Batcher:
    """Gathers waiting requests into batches of up to `max_batch_size` samples and scores up to
    `concurrency` batches at once (one per worker process of a reward file; a model, on one
    device, takes one). A batch is gathered when a scorer is free, from what waited for it."""

    def __init__(self, scorer: Scorer, max_batch_size: int, concurrency: int = 1) -> None:
        self.scorer = scorer
        self.max_batch_size = max_batch_size
        self.concurrency = concurrency
        self.stats = BatchStats()
        self.stopped: str | None = None
        """Why the scoring loop ended, once it has: every request from then on fails with it."""
        self._waiting: set[_Request] = set()
        self._send, self._receive = anyio.create_memory_object_stream[_Request](1 << 16)

    async def score(self, samples: tuple[list[str], list[str], list[Any]]) -> _Request:
        request = _Request(samples)
        self.stats.requests += 1
        if self.stopped is not None:
            request.error = self.stopped
            return request
        self._waiting.add(request)
        try:
            await self._send.send(request)
            await request.done.wait()
        finally:
            self._waiting.discard(request)
        return request

    async def run(self) -> None:
        """Score batches until cancelled. A scorer's exception fails the requests of its batch
        only; should the loop itself stop, the requests waiting and every later one fail with
        the reason instead of waiting forever."""
        try:
            await self._loop()
        except anyio.get_cancelled_exc_class():
            self._stop("the server is shutting down")
            raise
        except BaseException as exc:  # not raised on: the server must keep answering, saying why
            exc = _alone(exc)
            _logger.error("agenthub serve-rm: the scoring loop stopped", exc_info=exc)
            self._stop(f"the scoring loop stopped on {described(exc)}; restart agenthub serve-rm")

    async def _loop(self) -> None:
        free = anyio.Semaphore(self.concurrency)
        async with self._receive, anyio.create_task_group() as scoring:
            async for first in self._receive:
                await free.acquire()
                batch, size = [first], len(first.samples[0])
                while size < self.max_batch_size:
                    try:
                        more = self._receive.receive_nowait()
                    except anyio.WouldBlock:
                        break
                    batch.append(more)
                    size += len(more.samples[0])
                scoring.start_soon(self._score_then_release, batch, free)

    async def _score_then_release(self, batch: list[_Request], free: anyio.Semaphore) -> None:
        try:
            await self._score(batch)
        finally:
            free.release()

    def _stop(self, reason: str) -> None:
        self.stopped = reason
        for request in self._waiting:
            request.error = reason
            request.done.set()

    async def _score(self, batch: list[_Request]) -> None:
        self.stats.batches += 1
        self.stats.samples += sum(len(r.samples[0]) for r in batch)
        columns = tuple([x for r in batch for x in r.samples[i]] for i in range(3))
        try:
            output = await anyio.to_thread.run_sync(functools.partial(self.scorer, *columns))
            outputs = _split(output, [len(r.samples[0]) for r in batch])
        except Exception as exc:
            if len(batch) > 1:  # one bad request must not fail the requests batched with it
                for request in batch:
                    await self._score([request])
                return
            self.stats.failed += 1
            _logger.error("agenthub serve-rm: scoring failed", exc_info=exc)
            if isinstance(exc, AgentHubError):  # its message is written for the client
                batch[0].error = str(exc)
            else:
                batch[0].error = f"{described(exc)} (the server's log has the traceback)"
        else:
            for request, part in zip(batch, outputs, strict=True):
                request.output = part
        for request in batch:
            request.done.set()


def _alone(exc: BaseException) -> BaseException:
    """What stopped a batch's task, out of the exception group its task group wraps it in
    (duck-typed: the group is a builtin from Python 3.11, a backport's class on 3.10)."""
    inner = getattr(exc, "exceptions", None)
    while isinstance(inner, tuple) and len(inner) == 1 and isinstance(inner[0], BaseException):
        exc = inner[0]
        inner = getattr(exc, "exceptions", None)
    return exc


def _split(output: RewardOutput, sizes: list[int]) -> list[RewardOutput]:
    """One output per request, of `sizes` samples each; raises if the scorer gave another
    number of rewards."""
    if len(output.rewards) != sum(sizes):
        raise ValueError(f"the scorer gave {len(output.rewards)} rewards for {sum(sizes)} samples")
    starts = [sum(sizes[:i]) for i in range(len(sizes))]
    return [_slice(output, lo, lo + n) for lo, n in zip(starts, sizes, strict=True)]


def _slice(output: RewardOutput, lo: int, hi: int) -> RewardOutput:
    return RewardOutput(
        rewards=output.rewards[lo:hi],
        scores=None if output.scores is None else output.scores[lo:hi],
        extra_logs={k: v[lo:hi] for k, v in output.extra_logs.items()},
    )


def build_app(
    scorer: Scorer,
    *,
    name: str,
    max_batch_size: int = 64,
    needs_labels: bool = False,
    concurrency: int = 1,
) -> Starlette:
    """The Starlette app: `POST /get_reward` and `GET /health`. With `needs_labels`, a request
    without labels is refused (422) instead of scoring None labels. Up to `concurrency` batches
    are scored at once."""
    batcher = _Batcher(scorer, max_batch_size, concurrency)

    async def get_reward(request: Request) -> JSONResponse:
        try:
            samples = parse_request(await request.body(), needs_labels=needs_labels)
        except BadRequest as exc:
            status = 400 if "not JSON" in str(exc) else 422
            return JSONResponse({"detail": str(exc)}, status_code=status)
        done = await batcher.score(samples)
        if done.output is None:
            status = 500 if batcher.stopped is None else 503
            return JSONResponse({"detail": f"scoring failed: {done.error}"}, status_code=status)
        body: dict[str, Any] = {"rewards": done.output.rewards}
        if done.output.scores is not None:
            body["scores"] = done.output.scores
        if done.output.extra_logs:
            body["extra_logs"] = done.output.extra_logs
        return JSONResponse(body)

    async def health(request: Request) -> JSONResponse:
        stats = batcher.stats
        body: dict[str, Any] = {
            "status": "ok" if batcher.stopped is None else "stopped",
            "scorer": name,
            "requests": stats.requests,
            "batches": stats.batches,
            "samples": stats.samples,
            "failed": stats.failed,
        }
        if batcher.stopped is not None:
            body["reason"] = batcher.stopped
        return JSONResponse(body, status_code=200 if batcher.stopped is None else 503)

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
