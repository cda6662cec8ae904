from __future__ import annotations

import functools
import itertools
import random
import ssl
from collections.abc import Sequence
from typing import Any

import anyio
import httpx

from agenthub._errors import RewardModelError
from agenthub.envs.reward_func._output import RewardOutput, parse_reward_output


class RemoteRewardModel:
    """A client for reward servers speaking the OpenRLHF protocol.

    POST `{"query": [...], "prompts": [...], "labels": [...]}` to each URL; the answer is
    `{"rewards": [...], "scores"?: [...], "extra_logs"?: {...}}`. A batch is split into
    contiguous non-empty chunks over the URLs (never an empty request), rotating the starting
    URL so that single samples spread across servers. Connection errors, timeouts and 5xx
    answers are retried with jittered exponential backoff, each retry on the next URL; a 4xx
    answer is the caller's fault and is not retried.
    """

    def __init__(
        self,
        urls: str | Sequence[str],
        *,
        timeout_s: float = 30.0,
        max_retries: int = 3,
        backoff_s: float = 0.5,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.urls = [urls] if isinstance(urls, str) else list(urls)
        if not self.urls:
            raise ValueError("RemoteRewardModel needs at least one URL")
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self._client = httpx.AsyncClient(
            timeout=timeout_s, transport=transport, verify=_ssl_context()
        )
        self._next = itertools.count()

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
        start = next(self._next)
        results: list[RewardOutput | None] = [None] * k
        errors: list[RewardModelError] = []

        async def run(chunk: int) -> None:
            lo, hi = bounds[chunk]
            body = {"query": queries[lo:hi], "prompts": prompts[lo:hi], "labels": labels[lo:hi]}
            try:
                results[chunk] = await self._post(start + chunk, body, hi - lo)
            except RewardModelError as exc:  # surfaced below, not as an exception group
                errors.append(exc)

        async with anyio.create_task_group() as group:
            for chunk in range(k):
                group.start_soon(run, chunk)
        if errors:
            raise errors[0]
        return _concat([r for r in results if r is not None])

    async def _post(self, first_url: int, body: dict[str, list[Any]], n: int) -> RewardOutput:
        failures: list[str] = []
        for attempt in range(self.max_retries + 1):
            url = self.urls[(first_url + attempt) % len(self.urls)]
            if attempt:
                await anyio.sleep(self.backoff_s * 2 ** (attempt - 1) * random.uniform(0.5, 1.5))
            try:
                with anyio.fail_after(self.timeout_s):
                    response = await self._client.post(url, json=body)
            except (httpx.TransportError, TimeoutError) as exc:
                failures.append(f"{url}: {type(exc).__name__} {exc}".strip())
                continue
            if response.status_code >= 500:
                failures.append(f"{url}: HTTP {response.status_code}")
                continue
            if response.status_code >= 400:
                raise RewardModelError(
                    f"reward server {url} rejected the request with HTTP "
                    f"{response.status_code}: {response.text[:300]}"
                )
            try:
                payload = response.json()
            except ValueError as exc:
                raise RewardModelError(
                    f"reward server {url} answered non-JSON: {response.text[:200]!r}"
                ) from exc
            return parse_reward_output(
                payload,
                n,
                source=f"reward server {url}",
                samples=[f"query {i}" for i in range(n)],
                error=RewardModelError,
            )
        raise RewardModelError(
            f"reward server did not answer after {len(failures)} attempts "
            f"(timeout {self.timeout_s:g} s each): {'; '.join(failures)}. Check that the server "
            "is running and reachable, or raise the timeout."
        )

    async def aclose(self) -> None:
        await self._client.aclose()


@functools.cache
def _ssl_context() -> ssl.SSLContext:
    # Building a context loads the CA bundle (~30 ms); one env per episode must not pay that.
    return ssl.create_default_context()


def _concat(parts: list[RewardOutput]) -> RewardOutput:
    has_scores = all(p.scores is not None for p in parts)
    keys = set.intersection(*(set(p.extra_logs) for p in parts)) if parts else set()
    return RewardOutput(
        rewards=[r for p in parts for r in p.rewards],
        scores=[s for p in parts for s in (p.scores or [])] if has_scores else None,
        extra_logs={k: [v for p in parts for v in p.extra_logs[k]] for k in sorted(keys)},
    )
