"""`RemoteRewardModel`: the client for reward servers speaking OpenRLHF's `/get_reward`."""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import anyio
import httpx

from agenthub._errors import RewardModelError
from agenthub.envs._http import (
    HttpPolicy,
    JsonEndpoint,
    ResponseCache,
    server_answered,
    url_list,
)
from agenthub.envs.reward_func._output import RewardOutput, parse_reward_output

EXAMPLE_URL = "http://host:5000/get_reward"


class RemoteRewardModel:
    """A client for reward servers speaking the OpenRLHF protocol.

    POST `{"query": [...], "prompts": [...], "labels": [...]}` to each URL (`urls`: one, a
    list, or a string of several separated by commas, as OpenRLHF takes them); the answer is
    `{"rewards": [...], "scores"?: [...], "extra_logs"?: {...}}`. `score` splits a batch into
    contiguous non-empty chunks over the URLs (never an empty request), rotating the starting
    URL process-wide, per list of URLs, so that single samples spread across servers even
    with a client per episode. `score_batched` scores one sample and joins concurrent callers
    (from any number of clients with the same URLs and policy) into batches of up to
    `max_batch_size`. Retries, timeouts, limits and caching follow `policy` (see `HttpPolicy`);
    a failure raises `RewardModelError`, never a silent 0.
    """

    def __init__(
        self,
        urls: str | Sequence[str],
        *,
        timeout_s: float = 30.0,
        max_retries: int = 3,
        backoff_s: float = 0.5,
        policy: HttpPolicy | None = None,
        max_batch_size: int = 64,
        batch_window_s: float = 0.002,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.policy = policy or HttpPolicy(
            timeout_s=timeout_s, max_retries=max_retries, backoff_s=backoff_s
        )
        self._endpoint = JsonEndpoint(
            url_list(urls, argument="urls", example=EXAMPLE_URL),
            self.policy,
            service="reward server",
            error=RewardModelError,
            transport=transport,
        )
        self.urls = self._endpoint.urls
        self.max_batch_size = max_batch_size
        self.batch_window_s = batch_window_s
        self._transport = transport

    async def score(
        self, queries: list[str], prompts: list[str], labels: list[Any]
    ) -> RewardOutput:
        n = len(queries)
        if n == 0:
            return RewardOutput(rewards=[])
        if not len(prompts) == len(labels) == n:
            raise ValueError("queries, prompts and labels must have the same length")
        k = min(len(self.urls), n)
        bounds = [(i * n // k, (i + 1) * n // k) for i in range(k)]
        start = self._endpoint.next_first_url()
        results: list[RewardOutput | None] = [None] * k
        errors: list[RewardModelError] = []

        async def run(chunk: int) -> None:
            lo, hi = bounds[chunk]
            body = {"query": queries[lo:hi], "prompts": prompts[lo:hi], "labels": labels[lo:hi]}

            def parse(url: str, payload: Any) -> RewardOutput:
                return parse_reward_output(
                    payload,
                    hi - lo,
                    source=f"reward server {url}",
                    samples=[f"query {i}" for i in range(hi - lo)],
                    error=RewardModelError,
                )

            try:
                results[chunk] = await self._endpoint.post(body, parse, first_url=start + chunk)
            except RewardModelError as exc:  # surfaced below, not as an exception group
                errors.append(exc)

        async with anyio.create_task_group() as group:
            for chunk in range(k):
                group.start_soon(run, chunk)
        if errors:
            raise errors[0]
        return _concat([r for r in results if r is not None])

    async def score_batched(self, query: str, prompt: str, label: Any) -> RewardOutput:
        """Score one sample, sent together with the samples other callers submit meanwhile."""
        cache_key = ResponseCache.key([query, prompt, label])
        if self.policy.cache_size > 0:
            hit, value = self._endpoint.cache.get(cache_key)
            if hit:
                return value  # type: ignore[no-any-return]
        batcher = _batcher(self)
        future = batcher.submit((query, prompt, label))
        # shielded: a cancelled caller stops waiting, the batch still completes for the others
        output = await asyncio.shield(future)
        if self.policy.cache_size > 0:
            self._endpoint.cache.put(cache_key, output)
        return output

    def _flush_client(self) -> RemoteRewardModel:
        return RemoteRewardModel(
            self.urls, policy=replace(self.policy, cache_size=0), transport=self._transport
        )

    async def aclose(self) -> None:
        await self._endpoint.aclose()


@dataclass
class _Pending:
    sample: tuple[str, str, Any]
    future: asyncio.Future[RewardOutput]


class _Batcher:
    """Collects samples from concurrent callers; sends at most `max_concurrency` batches at once.

    Flushes run as tasks of the event loop, not of any caller, so one cancelled episode never
    strands the samples of others; every flush resolves every future it took. A batch the
    server refuses is sent again sample by sample (see `_score_each`), so that one bad sample
    does not fail the episodes batched with it.
    """

    def __init__(self, model: RemoteRewardModel) -> None:
        self.model = model
        self.pending: list[_Pending] = []
        self.in_flight = 0
        self.tasks: set[asyncio.Task[None]] = set()

    def submit(self, sample: tuple[str, str, Any]) -> asyncio.Future[RewardOutput]:
        loop = asyncio.get_running_loop()
        entry = _Pending(sample, loop.create_future())
        self.pending.append(entry)
        self._maybe_flush(loop)
        return entry.future

    def _maybe_flush(self, loop: asyncio.AbstractEventLoop) -> None:
        if self.pending and self.in_flight < self.model.policy.max_concurrency:
            self.in_flight += 1
            task = loop.create_task(self._flush())
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    async def _flush(self) -> None:
        batch: list[_Pending] = []
        try:
            await asyncio.sleep(self.model.batch_window_s)
            batch = self.pending[: self.model.max_batch_size]
            del self.pending[: len(batch)]
            if not batch:
                return
            client = self.model._flush_client()
            try:
                results = await _score_each(client, [e.sample for e in batch])
            finally:
                await client.aclose()
            for entry, result in zip(batch, results, strict=True):
                if entry.future.done():
                    continue
                if isinstance(result, RewardModelError):
                    entry.future.set_exception(result)
                else:
                    entry.future.set_result(result)
        except BaseException as exc:
            for entry in batch:
                if not entry.future.done():
                    entry.future.set_exception(
                        exc
                        if isinstance(exc, Exception)
                        else RewardModelError(
                            "the reward batch was cancelled: the event loop is shutting down"
                        )
                    )
            if not isinstance(exc, Exception):
                raise
        finally:
            self.in_flight -= 1
            self._maybe_flush(asyncio.get_running_loop())


async def _score_each(
    client: RemoteRewardModel, samples: list[tuple[str, str, Any]]
) -> list[RewardOutput | RewardModelError]:
    """One result per sample. A batch that servers answered with an error, or with an answer
    that cannot be used, is sent again a sample per request, so that only the samples to blame
    fail; one that got no answer (timeouts, refused connections) fails whole, as waiting once
    per sample would multiply the wait."""
    try:
        output = await client.score(
            [s[0] for s in samples], [s[1] for s in samples], [s[2] for s in samples]
        )
    except RewardModelError as exc:
        if len(samples) == 1 or not server_answered(exc):
            return [exc] * len(samples)
        results: list[RewardOutput | RewardModelError] = [exc] * len(samples)

        async def alone(i: int) -> None:
            results[i] = (await _score_each(client, [samples[i]]))[0]

        async with anyio.create_task_group() as group:
            for i in range(len(samples)):
                group.start_soon(alone, i)
        return results
    return [_one(output, i) for i in range(len(samples))]


_batchers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[Any, _Batcher]]
_batchers = weakref.WeakKeyDictionary()


def _batcher(model: RemoteRewardModel) -> _Batcher:
    per_loop = _batchers.setdefault(asyncio.get_running_loop(), {})
    key = (model._endpoint.key, model.max_batch_size, model.batch_window_s)
    if key not in per_loop:
        per_loop[key] = _Batcher(model)
    return per_loop[key]


def _one(output: RewardOutput, i: int) -> RewardOutput:
    return RewardOutput(
        rewards=[output.rewards[i]],
        scores=None if output.scores is None else [output.scores[i]],
        extra_logs={k: [v[i]] for k, v in output.extra_logs.items()},
    )


def _concat(parts: list[RewardOutput]) -> RewardOutput:
    has_scores = all(p.scores is not None for p in parts)
    keys = set.intersection(*(set(p.extra_logs) for p in parts)) if parts else set()
    return RewardOutput(
        rewards=[r for p in parts for r in p.rewards],
        scores=[s for p in parts for s in (p.scores or [])] if has_scores else None,
        extra_logs={k: [v for p in parts for v in p.extra_logs[k]] for k in sorted(keys)},
    )
